//! `up`: create or converge the cluster, bootstrap every node, check, print the Jupyter URL.
//! `scale` and `heal` end with the same.

use std::path::Path;

use super::output::{print_check, print_nodes};
use crate::context::Context;
use crate::converge;
use crate::error::Error;

pub async fn up(ctx: &Context, file: &Path, infra_only: bool) -> Result<u8, Error> {
    let cluster = converge::provision(ctx, file, infra_only).await?;
    print_nodes(&cluster.profile.name, &cluster.state);
    if infra_only {
        return Ok(0);
    }
    let ready = converge::bootstrap_and_check(ctx, &cluster).await?;
    print_check(&ready.check);
    println!("Jupyter Lab: {}", ready.jupyter_url);
    if let Some(fingerprint) = &ready.jupyter_fingerprint {
        // Printed, not kept in a log: the user compares it with what the browser shows.
        println!("Jupyter's certificate SHA-256 {fingerprint} (your browser must show this one)");
    }
    ctx.progress.line(format!(
        "cluster `{}` ready after {:.1}s",
        cluster.profile.name,
        cluster.started.elapsed().as_secs_f64()
    ));
    Ok(0)
}
