//! `jobs`, `logs` and `cancel`: the jobs `run` submitted, as the master's runner records them
//! ([`crate::jobs`]). `jobs` and `logs` talk to the master alone; `cancel` ends a running job's
//! processes on every node (each rank carries the job's number in its environment).

use std::path::Path;
use std::time::Duration;

use futures::future::join_all;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::bootstrap::{drop_archives_command, BootstrapError, NodeSession};
use crate::cluster::{self, Existing};
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::jobs::{self, job_ahead_line, Job, JobId, SlotsRefusal, State};
use crate::plan::{Names, Observed, Role};
use crate::provider::Provider;
use crate::ssh::{shell_quote, Ssh};
use crate::state::{self, ClusterDir};
use crate::templates;

/// Writes the runner to the master (this binary's version), root only.
pub(super) async fn write_runner(master: &NodeSession) -> Result<(), Error> {
    master
        .ssh
        .write_file(jobs::RUNNER, templates::JOB_RUNNER.as_bytes(), 0o700)
        .await
        .map_err(BootstrapError::from)?;
    Ok(())
}

/// Every job on record, in number order (none before the first `run`).
pub(super) async fn read_jobs(master: &NodeSession) -> Result<Vec<Job>, Error> {
    runner_list(&master.ssh, "list").await
}

/// One job, `None` when there is no such job.
async fn read_job(master: &NodeSession, id: JobId) -> Result<Option<Job>, Error> {
    let found = runner_list(&master.ssh, &format!("list {id}")).await?;
    Ok(found.into_iter().find(|j| j.id == id))
}

/// The runner's `list` (with `args`), read by its grammar; nothing before the first `run`.
pub(super) async fn runner_list(master: &Ssh, args: &str) -> Result<Vec<Job>, Error> {
    let out = master
        .sudo(&format!(
            "[ ! -e {} ] || {}",
            shell_quote(jobs::RUNNER),
            jobs::runner_call(args)
        ))
        .await
        .map_err(BootstrapError::from)?;
    jobs::parse_list(&out).map_err(Error::Runtime)
}

fn no_such_job(name: &str, id: JobId) -> Error {
    Error::Usage(format!(
        "cluster `{name}` has no job {id} (`hvd-cluster jobs` lists them)"
    ))
}

/// The master of an existing cluster, with a session to it alone.
pub(super) async fn master_only(ctx: &Context, existing: &Existing) -> Result<NodeSession, Error> {
    let master: Vec<_> = existing
        .nodes
        .iter()
        .filter(|n| n.role == Role::Master)
        .cloned()
        .collect();
    if master.is_empty() {
        return Err(Error::Runtime(format!(
            "cluster `{}` has no master",
            existing.profile.name
        )));
    }
    let mut sessions = existing
        .reach()
        .connect(ctx, &master, Duration::from_secs(120), None)
        .await?;
    Ok(sessions.remove(0))
}

/// Ctrl-C as this command's own signal (see `handles_interrupt` in args).
pub(super) fn interrupt_signal() -> Result<Signal, Error> {
    signal(SignalKind::interrupt())
        .map_err(|e| Error::Runtime(format!("cannot listen for Ctrl-C: {e}")))
}

/// Follows a job's output from its first line until it ends (the runner's `follow` on the
/// master, straight to this process's stdout), then says how it ended: the job's exit code.
/// Ctrl-C stops following, never the job.
pub(super) async fn follow(
    ctx: &Context,
    master: &NodeSession,
    shown: &str,
    id: JobId,
    interrupt: &mut Signal,
) -> Result<u8, Error> {
    let goes_on = format!(
        "`hvd-cluster logs {shown} {id} --follow` follows it again, `hvd-cluster cancel {shown} {id}` ends it"
    );
    let child = master
        .ssh
        .session()
        .raw_command(format!(
            "sudo -n {}",
            jobs::runner_call(&format!("follow {id}"))
        ))
        .stdin(openssh::Stdio::null())
        .stdout(openssh::Stdio::inherit())
        .stderr(openssh::Stdio::inherit())
        .spawn()
        .await
        .map_err(|e| Error::Runtime(format!("following job {id}: {e}")))?;
    let waited = tokio::select! {
        status = child.wait() => status,
        _ = interrupt.recv() => {
            return Err(Error::Stopped(format!(
                "stopped following job {id}; it goes on on the cluster: {goes_on}"
            )));
        }
    };
    let job = read_job(master, id).await;
    match (waited, job) {
        (_, Ok(Some(job))) if job.state.ended() => {
            if job.state != State::Succeeded {
                ctx.progress.line(format!("job {id} {}", job.how()));
            }
            Ok(job.exit_code())
        }
        (_, Ok(Some(_))) | (Err(_), _) => Err(Error::Runtime(format!(
            "lost job {id}'s output (the connection to the master); it goes on on the cluster: {goes_on}"
        ))),
        (Ok(_), Ok(None)) => Err(Error::Runtime(format!("job {id} is gone from the master"))),
        (Ok(_), Err(e)) => Err(e),
    }
}

/// `jobs`: every job on record, a table or `--json`.
pub async fn list(ctx: &Context, file: &Path, json: bool) -> Result<u8, Error> {
    let existing = cluster::existing(ctx, file).await?;
    let master = master_only(ctx, &existing).await?;
    let jobs = read_jobs(&master).await?;
    if json {
        let text = serde_json::to_string_pretty(&jobs)
            .map_err(|e| Error::Runtime(format!("jobs as JSON: {e}")))?;
        println!("{text}");
        return Ok(0);
    }
    if jobs.is_empty() {
        ctx.progress.line(format!(
            "cluster `{}` has no jobs yet: `hvd-cluster run` submits one",
            existing.profile.name
        ));
        return Ok(0);
    }
    let now = master
        .ssh
        .run("date +%s")
        .await
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    print!("{}", jobs::table(&jobs, now));
    Ok(0)
}

/// `logs`: a job's whole output (the latest job's without an id); `--follow` until it ends.
pub async fn logs(
    ctx: &Context,
    file: &Path,
    id: Option<&str>,
    follow_it: bool,
) -> Result<u8, Error> {
    let id = id.map(JobId::parse).transpose().map_err(Error::Usage)?;
    let mut interrupt = interrupt_signal()?;
    let existing = cluster::existing(ctx, file).await?;
    let name = existing.profile.name.to_string();
    let master = master_only(ctx, &existing).await?;
    let job = match id {
        Some(id) => read_job(&master, id)
            .await?
            .ok_or_else(|| no_such_job(&name, id))?,
        None => read_jobs(&master).await?.pop().ok_or_else(|| {
            Error::Runtime(format!(
                "cluster `{name}` has no jobs yet: `hvd-cluster run` submits one"
            ))
        })?,
    };
    if follow_it {
        let shown = input::shown(&file.to_string_lossy());
        return follow(ctx, &master, &shown, job.id, &mut interrupt).await;
    }
    let status = master
        .ssh
        .session()
        .raw_command(format!(
            "sudo -n cat {}",
            shell_quote(&format!("{}/{}/log", jobs::JOBS_DIR, job.id))
        ))
        .stdin(openssh::Stdio::null())
        .stdout(openssh::Stdio::inherit())
        .stderr(openssh::Stdio::inherit())
        .status()
        .await
        .map_err(|e| Error::Runtime(format!("reading job {}'s output: {e}", job.id)))?;
    if !status.success() {
        return Err(Error::Runtime(format!(
            "could not read job {}'s output on the master",
            job.id
        )));
    }
    ctx.progress.line(format!("job {}: {}", job.id, job.how()));
    Ok(0)
}

/// `cancel`: a queued job leaves the queue; a running one is ended on every node (TERM, then
/// KILL after 5 s), and `cancel` returns once no process of it is left anywhere.
pub async fn cancel(ctx: &Context, file: &Path, id: Option<&str>, all: bool) -> Result<u8, Error> {
    let id = id.map(JobId::parse).transpose().map_err(Error::Usage)?;
    let existing = cluster::existing(ctx, file).await?;
    let name = existing.profile.name.to_string();
    let sessions = existing
        .reach()
        .connect(ctx, &existing.nodes, Duration::from_secs(120), None)
        .await?;
    let master = &sessions[0];
    write_runner(master).await?;
    let jobs = read_jobs(master).await?;
    let targets: Vec<&Job> = match id {
        Some(id) => vec![jobs
            .iter()
            .find(|j| j.id == id)
            .ok_or_else(|| no_such_job(&name, id))?],
        // the queued ones first, so that none starts once the running one ends
        None if all => {
            let mut live: Vec<&Job> = jobs.iter().filter(|j| !j.state.ended()).collect();
            live.sort_by_key(|j| (j.state == State::Running, j.id));
            live
        }
        None => return Err(Error::Usage("give a job number, or --all".into())),
    };
    if targets.is_empty() {
        ctx.progress
            .line(format!("cluster `{name}` has no queued or running job"));
        return Ok(0);
    }
    for job in targets {
        cancel_one(ctx, &sessions, job.id).await?;
    }
    Ok(0)
}

async fn cancel_one(ctx: &Context, sessions: &[NodeSession], id: JobId) -> Result<(), Error> {
    let master = &sessions[0];
    let before = master
        .ssh
        .sudo(&jobs::runner_call(&format!("cancel {id}")))
        .await
        .map_err(BootstrapError::from)?;
    match before.trim() {
        "queued" => {
            ctx.progress.line(format!("job {id}: left the queue"));
            return Ok(());
        }
        "running" => {}
        "none" => return Err(Error::Runtime(format!("job {id} is gone from the master"))),
        ended => {
            let job = read_job(master, id).await?;
            let how = job.map_or_else(|| input::shown(ended), |j| j.how());
            ctx.progress
                .line(format!("job {id} had already ended: {how}"));
            return Ok(());
        }
    }
    // Every rank, on every node, by the job's number in its environment.
    let script = format!("set -- kill {id}\n{}", templates::JOB_RUNNER);
    let said = join_all(sessions.iter().map(|s| {
        let script = &script;
        async move {
            let out = tokio::time::timeout(Duration::from_secs(60), s.ssh.sudo(script)).await;
            (s, out)
        }
    }))
    .await;
    let (mut ended, mut left_on) = (0u32, Vec::new());
    for (s, out) in said {
        let name = &s.node.name;
        match out {
            Ok(Ok(out)) => match jobs::parse_killed(&out) {
                Some((killed, 0)) => ended += killed,
                Some((killed, left)) => {
                    ended += killed;
                    left_on.push(format!("{name}: {left} process(es) left"));
                }
                None => left_on.push(format!("{name}: {}", input::shown_message(out.trim(), 120))),
            },
            Ok(Err(e)) => left_on.push(format!("{name}: {e}")),
            Err(_) => left_on.push(format!("{name}: no answer in 60s")),
        }
    }
    if !left_on.is_empty() {
        return Err(Error::Runtime(format!(
            "job {id} could not be ended everywhere:\n  {}",
            left_on.join("\n  ")
        )));
    }
    // The runner records the end once horovodrun's `docker exec` returns.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let job = read_job(master, id).await?;
        if job.as_ref().is_none_or(|j| j.state.ended()) {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::Runtime(format!(
                "job {id}: its processes are gone, yet the master's runner did not record its end in 30s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ctx.progress.line(format!(
        "job {id} cancelled: {ended} process(es) ended on {} node(s), none left",
        sessions.len()
    ));
    Ok(())
}

/// The mark `run` leaves in the cluster's folder: `stop` asks the master for live jobs only
/// where a job was submitted from this folder, so that stopping a cluster that never ran one
/// (or whose servers answer no SSH) costs no connection.
const SUBMITTED_MARK: &str = "jobs-submitted";

/// Leaves the mark (before the submission: a failed one only makes `stop` look).
pub(super) fn mark_submitted(dir: &ClusterDir) -> Result<(), Error> {
    state::write_atomic(&dir.path.join(SUBMITTED_MARK), b"", 0o600)?;
    Ok(())
}

/// Refuses, in one line, to run `what` (`check`, `bench`) beside a queued or running job: it
/// would take the same slots. (A quick look before the work; the look that counts is the one
/// under the master's locks, [`jobs::claim_slots`], read by [`slots_taken`].)
pub(super) async fn refuse_beside_jobs(
    master: &NodeSession,
    name: &str,
    shown: &str,
    what: &str,
) -> Result<(), Error> {
    let jobs = read_jobs(master).await?;
    match beside_jobs(&jobs, name, shown, what) {
        Some(refused) => Err(refused),
        None => Ok(()),
    }
}

/// The one line for `what` refused beside the live ones of `jobs` (`None` without any).
fn beside_jobs(jobs: &[Job], name: &str, shown: &str, what: &str) -> Option<Error> {
    let live: Vec<&Job> = jobs.iter().filter(|j| !j.state.ended()).collect();
    let words = job_ahead_line(&live)?;
    Some(Error::Runtime(format!(
        "cluster `{name}` has {words}: `{what}` would run beside it on the same slots; \
         `hvd-cluster logs {shown} --follow` waits for the latest, `hvd-cluster cancel {shown} --all` ends them"
    )))
}

/// The line for `what` whose horovodrun the master refused (jobs, or another check, took
/// the slots between the first look and the start).
pub(super) fn slots_taken(refusal: &SlotsRefusal, name: &str, shown: &str, what: &str) -> Error {
    match refusal {
        SlotsRefusal::JobsAhead(jobs) => beside_jobs(jobs, name, shown, what)
            .unwrap_or_else(|| slots_taken(&SlotsRefusal::Busy, name, shown, what)),
        SlotsRefusal::Busy => Error::Runtime(format!(
            "cluster `{name}`: another `check` or `bench` is using every slot; `{what}` again once it ends"
        )),
    }
}

/// Before `stop`, on the master while it runs: its queued and running jobs, and the image's
/// archive it keeps for `scale` and `heal` (removed: it would go into the shelve snapshot).
/// Without `force` a stop under a job is refused in one line; with it the jobs are marked so
/// that their runner records them interrupted (the stop ends them). Nothing to ask where the
/// master is stopped, or was never reached from this folder; one that does not answer in 20 s
/// is stopped as it is (said in a line).
pub(super) async fn before_stop(
    ctx: &Context,
    dir: &ClusterDir,
    provider: &dyn Provider,
    servers: &[Observed],
    name: &str,
    shown: &str,
    force: bool,
) -> Result<(), Error> {
    let master_name = Names(name).master();
    if !servers
        .iter()
        .any(|o| o.name == master_name && !o.health.is_stopped())
    {
        return Ok(());
    }
    let submitted = dir.path.join(SUBMITTED_MARK).exists();
    let nodes = provider.nodes(name).await?;
    let asked = async {
        let Some(connected) = cluster::connect_master_from_folder(dir, &nodes).await else {
            return Ok(None);
        };
        let ssh = connected?;
        let jobs = if submitted {
            runner_list(&ssh, "list").await.map_err(|e| e.to_string())?
        } else {
            Vec::new()
        };
        Ok::<_, String>(Some((ssh, jobs)))
    };
    let (ssh, jobs) = match tokio::time::timeout(Duration::from_secs(20), asked).await {
        Ok(Ok(Some(found))) => found,
        Ok(Ok(None)) => return Ok(()),
        Ok(Err(e)) => {
            ctx.progress.line(format!(
                "could not reach the master before stopping it ({}); stopping",
                input::shown_message(&e, 160)
            ));
            return Ok(());
        }
        Err(_) => {
            ctx.progress
                .line("the master did not answer in 20s; stopping");
            return Ok(());
        }
    };
    let mut live: Vec<&Job> = jobs.iter().filter(|j| !j.state.ended()).collect();
    let words = job_ahead_line(&live);
    if let (Some(words), false) = (&words, force) {
        return Err(Error::Runtime(format!(
            "cluster `{name}` has {words}: `stop` would interrupt it; `hvd-cluster logs {shown} --follow` waits for the latest, \
             `hvd-cluster cancel {shown} --all` ends them, `hvd-cluster stop {shown} --force` stops anyway (recorded interrupted)"
        )));
    }
    drop_image_archive(ctx, &ssh, &master_name).await;
    let Some(words) = words else {
        return Ok(());
    };
    // the queued ones first, so that none starts once the running one ends
    live.sort_by_key(|j| (j.state == State::Running, j.id));
    for job in &live {
        let script = format!("set -- interrupt {}\n{}", job.id, templates::JOB_RUNNER);
        ssh.sudo(&script).await.map_err(BootstrapError::from)?;
    }
    ctx.progress.line(format!(
        "--force: {words}, recorded interrupted by this stop"
    ));
    Ok(())
}

/// The image's archive the master keeps for `scale` and `heal` would go into its shelve
/// snapshot: removed, best effort, said with its size when there was one.
async fn drop_image_archive(ctx: &Context, ssh: &Ssh, master: &str) {
    let dropped =
        tokio::time::timeout(Duration::from_secs(20), ssh.sudo(&drop_archives_command())).await;
    match dropped {
        Ok(Ok(out)) => {
            let bytes = out
                .trim()
                .strip_prefix("dropped=")
                .and_then(|b| b.parse::<u64>().ok())
                .unwrap_or(0);
            if bytes > 0 {
                ctx.progress.line(format!(
                    "{master}: removed the image's archive kept for scale and heal ({:.1} MB), not to go into the stop's snapshot",
                    bytes as f64 / 1e6
                ));
            }
        }
        Ok(Err(e)) => ctx.progress.line(format!(
            "{master}: could not remove the image's archive ({}); stopping",
            input::shown_message(&e.to_string(), 160)
        )),
        Err(_) => ctx.progress.line(format!(
            "{master}: the image's archive not removed in 20s; stopping"
        )),
    }
}
