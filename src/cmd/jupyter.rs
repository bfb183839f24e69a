//! `jupyter`: prints a Jupyter URL: a 127.0.0.1 one, keeping an SSH tunnel open when one is
//! needed, or a public Jupyter's HTTPS one with its certificate's fingerprint.

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
    let title = check::jupyter_title(url.at()).await?;
    println!("{} ({title})", url.reachable);
    if let Some(fingerprint) = &url.fingerprint {
        println!("certificate SHA-256 {fingerprint}");
    }
    if url.reachable != url.shown {
        ctx.progress.line("the tunnel stays open until Ctrl-C");
        std::future::pending::<()>().await;
    }
    Ok(0)
}
