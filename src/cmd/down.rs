//! `down`: says what goes (servers, disks, network pieces, what /shared holds, the jobs on
//! record) and asks on a terminal (`--yes` for scripts; refused without either), then
//! deletes everything tagged with the cluster, last created first, proves through the API
//! that nothing is left, and removes the cluster's folder. Safe to repeat.

use std::time::Duration;

use crate::apply::ApplyError;
use crate::cluster;
use crate::cluster::Target;
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::jobs::State;
use crate::plan::{self, Health, Kind, Names, Observation};
use crate::state::ClusterDir;

/// How long `down` waits for the master to say what /shared holds before it says "unknown".
const MASTER_READ: Duration = Duration::from_secs(20);

pub async fn down(ctx: &Context, target: Target, yes: bool) -> Result<u8, Error> {
    let started = std::time::Instant::now();
    let (name, dir, provider) = cluster::target(ctx, target).await?;
    let lock = dir.lock()?;
    let applier = ctx.applier(provider.as_ref(), &dir, dir.load()?);
    let observed = applier.observe().await?;
    let plan = plan::teardown(&observed);
    if plan.actions.is_empty() {
        ctx.progress
            .line(format!("cluster `{name}`: nothing to delete"));
        for line in plan::teardown_summary(&observed) {
            ctx.progress.line(format!("  {line}"));
        }
    } else {
        let count = plan.actions.len();
        let mut said = vec![format!(
            "cluster `{name}`: down deletes {count} resource(s):"
        )];
        said.extend(
            plan::teardown_summary(&observed)
                .into_iter()
                .map(|l| format!("  {l}")),
        );
        said.extend(
            on_the_master(&dir, &name, &observed)
                .await
                .into_iter()
                .map(|l| format!("  {l}")),
        );
        for line in &said {
            eprintln!("{line}");
        }
        confirm(&name, count, yes)?;
        ctx.progress
            .line(format!("cluster `{name}`: deleting {count} resources"));
        applier.apply(&plan).await?;
    }
    // A kept or taken share stays, open to no network of the cluster's.
    if let Some(line) = provider.release_share(&name).await? {
        ctx.progress.line(line);
    }
    // A cloud whose policy hides the user's credentials must not keep `down` from finishing:
    // the user is told what to delete by hand instead.
    match provider.delete_credentials(&name).await {
        Ok(0) => {}
        Ok(n) => ctx
            .progress
            .line(format!("deleted {n} autostop credential(s) of `{name}`")),
        Err(e) => ctx.progress.line(format!(
            "warning: could not look for `{name}`'s autostop credentials ({}); delete any application credential named hvd-cluster-{name}-autostop-N by hand",
            input::shown_message(&e.to_string(), 300)
        )),
    }
    match provider.delete_data_credentials(&name).await {
        Ok(0) => {}
        Ok(n) => ctx.progress.line(format!(
            "deleted {n} object store credential(s) of `{name}`"
        )),
        Err(e) => ctx.progress.line(format!(
            "warning: could not look for `{name}`'s object store credentials ({}); delete any application credential named hvd-cluster-{name}-data-N by hand",
            input::shown_message(&e.to_string(), 300)
        )),
    }
    // Prove it through the API before forgetting the cluster.
    let left: Vec<_> = provider
        .observe(&name)
        .await
        .map_err(ApplyError::Observe)?
        .into_iter()
        .filter(|o| !o.kept)
        .collect();
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
    let kept: Vec<String> = observed
        .resources
        .iter()
        .filter(|o| o.kept)
        .map(|o| format!("{} {}", o.kind.label(), input::shown(o.shown_name())))
        .collect();
    if kept.is_empty() {
        println!("cluster `{name}`: deleted; nothing tagged with it is left");
    } else {
        println!(
            "cluster `{name}`: deleted; kept (storage.keep): {}",
            kept.join(", ")
        );
    }
    Ok(0)
}

/// What deleting the master loses, read from it: /shared's size and files, and the jobs on
/// record. Best effort, at most [`MASTER_READ`]: a stopped master, a folder without the
/// cluster's key (`down --cluster` elsewhere) or a master that does not answer is said so.
async fn on_the_master(dir: &ClusterDir, name: &str, observed: &Observation) -> Vec<String> {
    let master = Names(name).master();
    let kept_on = observed
        .resources
        .iter()
        .find(|o| matches!(o.kind, Kind::Volume | Kind::Share) && o.kept)
        .map(|o| format!("{} {}", o.kind.label(), input::shown(o.shown_name())));
    let server = observed
        .resources
        .iter()
        .find(|o| o.kind == Kind::Server && o.name == master);
    let unknown = |why: &str| vec![format!("/shared: unknown, {why}")];
    match server.map(|s| &s.health) {
        None => return unknown("there is no master"),
        Some(Health::Stopped | Health::Stopping) => return unknown("the master is stopped"),
        Some(_) => {}
    }
    // Never the first contact (a cluster made with --no-bootstrap): down learns no host key.
    let pinned = std::fs::read_to_string(dir.path.join("known_hosts")).unwrap_or_default();
    if !pinned
        .lines()
        .any(|l| l.split(' ').next() == Some(master.as_str()))
    {
        return unknown("the master was never reached over SSH from here");
    }
    let nodes = dir.load().map(|s| s.nodes).unwrap_or_default();
    let read = async {
        let ssh = match cluster::connect_master_from_folder(dir, &nodes).await {
            None => return unknown("this machine holds no key to the master"),
            Some(Err(e)) => {
                return unknown(&format!(
                    "the master did not answer ({})",
                    input::shown_message(&e, 200)
                ))
            }
            Some(Ok(ssh)) => ssh,
        };
        let mut lines = match ssh
            .sudo("du -sxb /shared 2>/dev/null | cut -f1; find /shared -xdev -type f 2>/dev/null | wc -l")
            .await
        {
            Ok(out) => vec![shared_line(&out, kept_on.as_deref())],
            Err(e) => unknown(&input::shown_message(&e.to_string(), 200)),
        };
        if let Ok(jobs) = super::jobs::runner_list(&ssh, "list").await {
            let count = |state: State| jobs.iter().filter(|j| j.state == state).count();
            let (running, queued) = (count(State::Running), count(State::Queued));
            lines.push(match jobs.len() {
                0 => "jobs on record: none".to_string(),
                n => format!("jobs on record: {n} ({running} running, {queued} queued), their logs go with the master"),
            });
        }
        lines
    };
    tokio::time::timeout(MASTER_READ, read)
        .await
        .unwrap_or_else(|_| {
            unknown(&format!(
                "the master did not answer in {}s",
                MASTER_READ.as_secs()
            ))
        })
}

/// `du`'s bytes and `find`'s count, as one line.
fn shared_line(out: &str, kept_on: Option<&str>) -> String {
    let mut numbers = out.lines().map(|l| l.trim().parse::<u64>());
    let fate = match kept_on {
        Some(holder) => format!("kept on {holder}"),
        None => "deleted with it".to_string(),
    };
    match (numbers.next(), numbers.next()) {
        (Some(Ok(bytes)), Some(Ok(files))) => format!(
            "/shared: {:.1} MB in {files} file(s), {fate}",
            bytes as f64 / 1e6
        ),
        _ => format!(
            "/shared: unknown (the master said {})",
            input::shown_message(out, 80)
        ),
    }
}

/// `--yes`, or a `y` typed on the terminal; refused (exit 2) with neither to ask.
fn confirm(name: &str, count: usize, yes: bool) -> Result<(), Error> {
    match super::ask("Delete all of it?", yes, "down: nothing deleted")? {
        super::Answer::Yes => Ok(()),
        super::Answer::NoTerminal => Err(Error::Usage(format!(
            "down: nothing deleted: cluster `{name}` has {count} resource(s) to delete and no terminal to ask on; pass --yes to delete without asking"
        ))),
        super::Answer::No(answer) => Err(Error::Runtime(format!(
            "down: nothing deleted (answered \"{answer}\"); cluster `{name}` is as it was"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_line_reads_du_and_find_and_says_what_else_it_got() {
        assert_eq!(
            shared_line("1234567890\n42\n", None),
            "/shared: 1234.6 MB in 42 file(s), deleted with it"
        );
        assert_eq!(
            shared_line("1234567890\n42\n", Some("volume demo-shared-volume")),
            "/shared: 1234.6 MB in 42 file(s), kept on volume demo-shared-volume"
        );
        let odd = shared_line("Permission denied\n\u{1b}[2J", None);
        assert!(
            odd.starts_with("/shared: unknown (the master said "),
            "{odd}"
        );
        assert!(!odd.contains('\u{1b}'), "{odd}");
    }
}
