//! The data a converge brings along: the profile's `[[data]]` pushed to /shared, and what was
//! staged on every node staged onto the nodes that lack it, before discovery lists them.

use crate::bootstrap;
use crate::context::Context;
use crate::error::Error;
use crate::profile::Profile;
use crate::state::ClusterDir;
use crate::transfer;

/// The profile's `[[data]]` into /shared from this machine, as `push` sends it (only what is
/// new or changed: a converge of an unchanged tree sends no file); entries with
/// `stage = true` join what is staged on every node. A local path that is not here (a `start`
/// from another machine) is said, and /shared left as it is.
pub(super) async fn deliver(
    ctx: &Context,
    p: &Profile,
    dir: &ClusterDir,
    master: &bootstrap::NodeSession,
) -> Result<(), Error> {
    for d in &p.data {
        let remote = d
            .shared_path()
            .map_err(|e| Error::Usage(format!("[[data]]: {}", e.0)))?;
        if d.local.symlink_metadata().is_err() {
            ctx.progress.line(format!(
                "data: {} is not on this machine; {remote} left as it is",
                transfer::tree::shown_path(&d.local)
            ));
        } else {
            let opts = transfer::Options::default();
            let source = transfer::Source::read(&d.local, &opts)?;
            let summary =
                transfer::push(&master.ssh, source, &remote, &opts, &ctx.progress).await?;
            ctx.progress.line(format!("data: {summary}"));
        }
        if d.stage {
            let mut st = dir.load()?;
            if !st.staged.iter().any(|s| s == remote.as_str()) {
                st.staged.push(remote.as_str().to_string());
                dir.save(&st)?;
            }
        }
    }
    Ok(())
}

/// Stages what `stage` copied onto every node (kept in the cluster's state) onto the nodes
/// that lack it: a worker `scale` or `heal` added, a blank ephemeral disk after `start`. Only
/// those nodes take part; a node that has it costs one manifest. A source gone from /shared
/// is said and forgotten; any other failure stops the command (the new nodes would join
/// without their data).
pub(super) async fn restage(
    ctx: &Context,
    dir: &ClusterDir,
    sessions: &[bootstrap::NodeSession],
) -> Result<(), Error> {
    let st = dir.load()?;
    let mut forgotten = Vec::new();
    for raw in &st.staged {
        let source = match transfer::paths::SharedPath::parse(raw) {
            Ok(s) => s,
            Err(e) => {
                ctx.progress.line(format!(
                    "stage: {} in the cluster's state is not a path below /shared ({}); forgotten",
                    crate::input::shown(raw),
                    e.0
                ));
                forgotten.push(raw.clone());
                continue;
            }
        };
        let opts = transfer::Options::default();
        match transfer::stage(sessions, &source, &opts, &ctx.progress).await {
            Ok(summary) => ctx.progress.line(summary.to_string()),
            Err(transfer::TransferError::Missing(_)) => {
                ctx.progress.line(format!(
                    "stage: {source} is no longer on /shared; new nodes do not get it (forgotten)"
                ));
                forgotten.push(raw.clone());
            }
            Err(e) => return Err(e.into()),
        }
    }
    if !forgotten.is_empty() {
        let mut st = dir.load()?;
        st.staged.retain(|s| !forgotten.contains(s));
        dir.save(&st)?;
    }
    Ok(())
}
