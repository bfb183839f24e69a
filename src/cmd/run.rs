//! `run`: a job on the master (`horovodrun` over every slot, or elastic), run by the master's
//! job runner detached from this process ([`crate::jobs`]): closing the laptop, a lost
//! connection or Ctrl-C stops following it, not the job. Without `--detach` the job's output
//! is followed from its first line and `run` ends with its exit status. `--send` copies files
//! and folders into /shared first, as `push` does; `--timeline` has Horovod record its
//! timeline into the job's folder on /shared.

use std::path::{Path, PathBuf};

use super::jobs::{follow, interrupt_signal, mark_submitted, master_only, write_runner};
use crate::bootstrap::BootstrapError;
use crate::check;
use crate::cluster::{self, Existing};
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::jobs::{self, job_ahead_line, State};

#[allow(clippy::too_many_arguments)]
pub async fn run(
    ctx: &Context,
    file: &Path,
    elastic: Option<(Option<u32>, Option<u32>)>,
    send: &[PathBuf],
    mpi_args: Option<&str>,
    detach: bool,
    timeline: bool,
    command: &[String],
) -> Result<u8, Error> {
    // Ctrl-C is this command's own: before the job is submitted it submits nothing; once it
    // is, it stops following and says how to follow or end the job.
    let mut interrupt = interrupt_signal()?;
    // Where each --send lands, checked before anything is asked of the cloud.
    let no_options = crate::transfer::Options::default();
    let sends = send
        .iter()
        .map(|local| {
            let remote = super::push::remote_for(local, None)?;
            Ok((crate::transfer::Source::read(local, &no_options)?, remote))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let prepared = async {
        let existing = cluster::existing(ctx, file).await?;
        let p = &existing.profile;
        if let Some(extra) = mpi_args {
            crate::mpi::check_mpi_args(extra, p.container.collective, elastic.is_some())
                .map_err(|e| Error::Usage(e.to_string()))?;
        }
        // horovodrun's arguments need every node's interface: the last bootstrap kept them,
        // so a session to the master alone will do; a cluster bootstrapped before they were
        // kept is asked (a session to every node).
        let (master, ifaces) = match kept_ifaces(&existing)? {
            Some(ifaces) => (master_only(ctx, &existing).await?, ifaces),
            None => {
                let mut opened = existing.open(ctx).await?;
                let ifaces = opened.sessions.iter().map(|s| s.iface.clone()).collect();
                (opened.sessions.swap_remove(0), ifaces)
            }
        };
        // Each file or folder to /shared/NAME, as `push` sends it (only what changed travels).
        for (source, remote) in sends {
            let summary =
                crate::transfer::push(&master.ssh, source, &remote, &no_options, &ctx.progress)
                    .await?;
            ctx.progress.line(summary.to_string());
        }
        let nodes: Vec<check::LaunchNode> = existing
            .nodes
            .iter()
            .zip(&ifaces)
            .map(|(n, iface)| check::LaunchNode {
                slots: n.slots.max(1),
                iface,
            })
            .collect();
        let slots: u32 = nodes.iter().map(|n| n.slots).sum();
        let elastic = elastic.map(|(min, max)| (min.unwrap_or(1), max.unwrap_or(slots)));
        let mut argv = check::horovodrun_args(p, &nodes, elastic, mpi_args);
        argv.extend(command.iter().cloned());
        write_runner(&master).await?;
        mark_submitted(&existing.dir)?;
        Ok::<_, Error>((master, argv, slots, elastic.is_some()))
    };
    let (master, argv, slots, elastic) = tokio::select! {
        prepared = prepared => prepared?,
        _ = interrupt.recv() => {
            return Err(Error::Stopped("interrupted; no job was submitted".into()));
        }
    };
    ctx.progress.line(format!("$ {}", argv.join(" ")));
    // One call: the jobs on record before this one, then the new job's number.
    let out = master
        .ssh
        .sudo(&jobs::submit_script(
            &argv, command, slots, elastic, timeline,
        ))
        .await
        .map_err(BootstrapError::from)?;
    let (ahead, id) = jobs::parse_submitted(&out).map_err(|e| {
        Error::Runtime(format!(
            "the master did not say the new job's number: {e}: {}",
            input::shown_message(out.trim(), 200)
        ))
    })?;
    let waiting: Vec<&jobs::Job> = ahead
        .iter()
        .filter(|j| matches!(j.state, State::Queued | State::Running))
        .collect();
    ctx.progress.line(match job_ahead_line(&waiting) {
        Some(behind) => format!("job {id}: queued behind {behind}"),
        None => format!("job {id}: started"),
    });
    let shown = input::shown(&file.to_string_lossy());
    if timeline {
        let path = jobs::timeline_path(id);
        ctx.progress.line(format!(
            "job {id}: Horovod's timeline goes to {path}; `hvd-cluster pull {shown} {path}` brings it back (open it in Perfetto or chrome://tracing)"
        ));
    }
    if detach {
        println!("{id}");
        ctx.progress.line(format!(
            "job {id} goes on without this command: `hvd-cluster logs {shown} {id} --follow` follows it, `hvd-cluster cancel {shown} {id}` ends it"
        ));
        return Ok(0);
    }
    follow(ctx, &master, &shown, id, &mut interrupt).await
}

/// Every node's interface as the last bootstrap kept it, in the order of `existing.nodes`;
/// `None` when one is missing. A kept name that is not an interface's is refused.
fn kept_ifaces(existing: &Existing) -> Result<Option<Vec<String>>, Error> {
    let kept = existing.dir.load()?.ifaces;
    let mut ifaces = Vec::new();
    for n in &existing.nodes {
        let Some(iface) = kept.get(&n.name) else {
            return Ok(None);
        };
        input::check_interface_name(iface).map_err(|e| {
            Error::Runtime(format!(
                "{}: {}'s interface: {e}",
                existing.dir.state_file().display(),
                input::shown(&n.name)
            ))
        })?;
        ifaces.push(iface.clone());
    }
    Ok(Some(ifaces))
}
