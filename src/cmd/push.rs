//! `push`: a local folder or file into /shared on the master ([`crate::transfer::push`]).
//! Ctrl-C stops it at once: every file that arrived is whole, and the same command again
//! sends the rest.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::jobs::{interrupt_signal, master_only};
use super::shown_path;
use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::transfer::{self, paths::SharedPath, Options};

pub async fn push(
    ctx: &Context,
    file: &Path,
    local: &Path,
    remote: Option<&str>,
    opts: &Options,
) -> Result<u8, Error> {
    // Every path is checked before the cloud or a node is asked anything.
    let remote = remote_for(local, remote)?;
    let source = transfer::Source::read(local, opts)?;
    until_interrupted("push", "sends", async {
        let existing = cluster::existing(ctx, file).await?;
        let master = master_only(ctx, &existing).await?;
        Ok(transfer::push(&master.ssh, source, &remote, opts, &ctx.progress).await?)
    })
    .await
}

/// Runs a transfer until it ends, printing its summary, or until Ctrl-C: every file that
/// arrived is whole then, and the same command again moves only what is missing.
pub(super) async fn until_interrupted(
    verb: &str,
    what: &str,
    work: impl std::future::Future<Output = Result<transfer::Summary, Error>>,
) -> Result<u8, Error> {
    let mut interrupt = interrupt_signal()?;
    let summary = tokio::select! {
        done = work => done?,
        _ = interrupt.recv() => return Err(Error::Stopped(format!(
            "interrupted: every file that arrived is whole; the same `{verb}` again {what} only what is missing"
        ))),
    };
    println!("{summary}");
    Ok(0)
}

/// Where a local path lands: the path given, or /shared/NAME.
pub(super) fn remote_for(local: &Path, remote: Option<&str>) -> Result<SharedPath, Error> {
    let refused = |e: crate::input::Refused| Error::Usage(e.0);
    match remote {
        Some(r) => SharedPath::parse(r).map_err(refused),
        None => {
            // `.` or `dir/..` name no folder of their own: their real name is used
            let named = std::path::absolute(local)
                .ok()
                .and_then(|p| p.canonicalize().ok().or(Some(p)))
                .and_then(|p| p.file_name().map(|n| n.as_bytes().to_vec()))
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "{}: no name to give it on the cluster; name the path below /shared",
                        shown_path(local)
                    ))
                })?;
            SharedPath::for_name(&named).map_err(refused)
        }
    }
}
