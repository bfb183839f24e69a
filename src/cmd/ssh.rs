//! `ssh`: opens `ssh` to a node (the master by default) through the cluster's ssh_config.

use std::path::Path;

use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::plan;

pub async fn ssh(
    ctx: &Context,
    file: &Path,
    node: Option<&str>,
    command: &[String],
) -> Result<u8, Error> {
    let existing = cluster::existing(ctx, file).await?;
    let reach = existing.reach();
    let path = reach.ssh_config()?;
    let (p, nodes) = (&existing.profile, &existing.nodes);
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
    // ssh's own warning of a changed key would send the user to ssh-keygen: say why first.
    let master = plan::Names(&p.name).master();
    for n in [&master, &target] {
        if let Some(how) = reach.renewing(n) {
            ctx.progress.line(format!(
                "note: {n} was {}; if ssh says its host key changed, run `hvd-cluster start {}` \
                 again first: it vouches for the new key against the server's console",
                how.by_an_unfinished_command(),
                crate::cmd::shown_path(file)
            ));
            break;
        }
    }
    let status = std::process::Command::new("ssh")
        .arg("-F")
        .arg(&path)
        .arg(&target)
        .args(command)
        .status()
        .map_err(|e| Error::Runtime(format!("cannot run ssh: {e}")))?;
    Ok(status.code().map_or(1, |c| c.clamp(0, 255) as u8))
}
