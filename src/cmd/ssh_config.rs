//! `ssh-config`: prints the cluster's ssh_config (use with `ssh -F`).

use std::path::Path;

use crate::cluster;
use crate::context::Context;
use crate::error::Error;

pub async fn ssh_config(ctx: &Context, file: &Path) -> Result<u8, Error> {
    let existing = cluster::existing(ctx, file).await?;
    let path = existing.reach().ssh_config()?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::Runtime(format!("reading {}: {e}", path.display())))?;
    print!("{text}");
    Ok(0)
}
