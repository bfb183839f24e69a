//! `stage`: a folder or file below /shared onto every node's own disk
//! ([`crate::transfer::stage`]). Ctrl-C stops it at once: every file that arrived is whole,
//! and the same command again sends the rest.

use std::path::Path;

use super::push::until_interrupted;
use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::transfer::{self, paths::SharedPath, Options};

pub async fn stage(ctx: &Context, file: &Path, source: &str, opts: &Options) -> Result<u8, Error> {
    // The path is checked before the cloud or a node is asked anything.
    let source = SharedPath::parse(source).map_err(|e| Error::Usage(e.0))?;
    until_interrupted("stage", "sends", async {
        let existing = cluster::existing(ctx, file).await?;
        let opened = existing.open(ctx).await?;
        Ok(transfer::stage(&opened.sessions, &source, opts, &ctx.progress).await?)
    })
    .await
}
