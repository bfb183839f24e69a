//! `jupyter`: prints a 127.0.0.1 Jupyter URL, keeping an SSH tunnel open when one is needed.

use std::path::Path;

use crate::check;
use crate::cluster;
use crate::context::Context;
use crate::error::Error;

pub async fn jupyter(ctx: &Context, file: &Path) -> Result<u8, Error> {
    let existing = cluster::existing(ctx, file).await?;
    let opened = existing.open(ctx).await?;
    let url = opened
        .jupyter_url(&existing.profile, existing.provider.as_ref())
        .await?;
    let title = check::jupyter_title(&url.reachable).await?;
    println!("{} ({title})", url.reachable);
    if url.reachable != url.shown {
        ctx.progress.line("the tunnel stays open until Ctrl-C");
        std::future::pending::<()>().await;
    }
    Ok(0)
}
