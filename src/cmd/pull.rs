//! `pull`: a folder or file below /shared on the master to this machine
//! ([`crate::transfer::pull`]). Ctrl-C stops it at once: every file that arrived is whole, and
//! the same command again fetches the rest.

use std::path::{Path, PathBuf};

use super::jobs::master_only;
use super::push::until_interrupted;
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
    until_interrupted("pull", "fetches", async {
        let existing = cluster::existing(ctx, file).await?;
        let master = master_only(ctx, &existing).await?;
        Ok(transfer::pull(&master.ssh, &remote, &local, opts, &ctx.progress).await?)
    })
    .await
}
