//! `stage`: a folder or file below /shared onto every node's own disk
//! ([`crate::transfer::stage`]), kept in the cluster's state so that every later bootstrap
//! stages it onto the nodes that lack it. Ctrl-C stops it at once: every file that arrived is
//! whole, and the same command again sends the rest.

use std::path::Path;

use super::push::until_interrupted;
use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::transfer::stage::STAGED_IN_CONTAINER;
use crate::transfer::{self, paths::SharedPath, Options};

pub async fn stage(ctx: &Context, file: &Path, source: &str, opts: &Options) -> Result<u8, Error> {
    // The path is checked before the cloud or a node is asked anything.
    let source = SharedPath::parse(source).map_err(|e| Error::Usage(e.0))?;
    until_interrupted("stage", "sends", async {
        let existing = cluster::existing(ctx, file).await?;
        // Copies are named by the source's last part: one name, one source.
        let st = existing.dir.load()?;
        if let Some(other) = st.staged.iter().find(|s| {
            *s != source.as_str() && s.rsplit('/').next() == Some(source.name())
        }) {
            return Err(Error::Usage(format!(
                "{STAGED_IN_CONTAINER}/{} holds {} already; stage {source} under another name (push it elsewhere below /shared first)",
                source.name(),
                crate::input::shown(other)
            )));
        }
        let opened = existing.open(ctx).await?;
        let summary = transfer::stage(&opened.sessions, &source, opts, &ctx.progress).await?;
        // Kept: nodes added or made anew later get it before they join (converge::restage).
        let mut st = existing.dir.load()?;
        if !st.staged.iter().any(|s| s == source.as_str()) {
            st.staged.push(source.as_str().to_string());
            existing.dir.save(&st)?;
        }
        Ok(summary)
    })
    .await
}
