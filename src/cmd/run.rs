//! `run`: `horovodrun` over every slot (or elastic), from the master's container, with the
//! output streamed; `--send` copies files into /shared first.

use std::path::{Path, PathBuf};

use super::shown_path;
use crate::bootstrap::BootstrapError;
use crate::check;
use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::ssh;

pub async fn run(
    ctx: &Context,
    file: &Path,
    elastic: Option<(Option<u32>, Option<u32>)>,
    send: &[PathBuf],
    mpi_args: Option<&str>,
    command: &[String],
) -> Result<u8, Error> {
    let existing = cluster::existing(ctx, file).await?;
    let p = &existing.profile;
    if let Some(extra) = mpi_args {
        crate::mpi::check_mpi_args(extra, p.container.collective, elastic.is_some())
            .map_err(|e| Error::Usage(e.to_string()))?;
    }
    let opened = existing.open(ctx).await?;
    let master = opened.master();
    for local in send {
        let name = local.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
            Error::Usage(format!("--send {}: not a file name", shown_path(local)))
        })?;
        let body = std::fs::read(local)
            .map_err(|e| Error::Usage(format!("--send {}: {e}", shown_path(local))))?;
        master
            .ssh
            .write_file(&format!("/shared/{name}"), &body, 0o644)
            .await
            .map_err(BootstrapError::from)?;
        ctx.progress
            .line(format!("sent {} to /shared/{name}", local.display()));
    }
    let slots: u32 = opened.sessions.iter().map(|s| s.node.slots.max(1)).sum();
    let elastic = elastic.map(|(min, max)| (min.unwrap_or(1), max.unwrap_or(slots)));
    let mut argv = check::horovodrun_args(p, &opened.sessions, elastic, mpi_args);
    argv.extend(command.iter().cloned());
    let quoted: Vec<String> = argv.iter().map(|a| ssh::shell_quote(a)).collect();
    let remote = format!("sudo -n docker exec -w /shared hvd {}", quoted.join(" "));
    ctx.progress.line(format!("$ {}", argv.join(" ")));
    let status = master
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
