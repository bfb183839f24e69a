//! `pull`: a folder or file below /shared on the master to this machine
//! ([`crate::transfer::pull`]). Ctrl-C stops it at once: every file that arrived is whole, and
//! the same command again fetches the rest.

use std::path::{Path, PathBuf};

use super::jobs::{interrupt_signal, master_only};
use super::push::interrupted;
use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::transfer::{self, paths::SharedPath, Options};

pub async fn pull(
    ctx: &Context,
    file: &Path,
    remote: &str,
    local: Option<&Path>,
    opts: &Options,
) -> Result<u8, Error> {
    let remote = SharedPath::parse(remote).map_err(|e| Error::Usage(e.0))?;
    let local = local.map_or_else(|| PathBuf::from(remote.name()), Path::to_path_buf);
    let mut interrupt = interrupt_signal()?;
    let work = async {
        let existing = cluster::existing(ctx, file).await?;
        let master = master_only(ctx, &existing).await?;
        let summary = transfer::pull(&master.ssh, &remote, &local, opts, &ctx.progress).await?;
        Ok::<_, Error>(summary)
    };
    let summary = tokio::select! {
        done = work => done?,
        _ = interrupt.recv() => return Err(interrupted("pull", "fetches")),
    };
    println!("{summary}");
    Ok(0)
}
