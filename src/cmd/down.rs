//! `down`: deletes everything tagged with the cluster, last created first, proves through
//! the API that nothing is left, then removes the cluster's folder. Safe to repeat.

use crate::apply::ApplyError;
use crate::cluster;
use crate::cluster::Target;
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::plan;

pub async fn down(ctx: &Context, target: Target) -> Result<u8, Error> {
    let started = std::time::Instant::now();
    let (name, dir, provider) = cluster::target(ctx, target).await?;
    let lock = dir.lock()?;
    let applier = ctx.applier(provider.as_ref(), &dir, dir.load()?);
    let observed = applier.observe().await?;
    if observed.resources.is_empty() {
        ctx.progress
            .line(format!("cluster `{name}`: nothing to delete"));
    } else {
        let plan = plan::teardown(&observed);
        ctx.progress.line(format!(
            "cluster `{name}`: deleting {} resources",
            plan.actions.len()
        ));
        applier.apply(&plan).await?;
    }
    // A cloud whose policy hides the user's credentials must not keep `down` from finishing:
    // the user is told what to delete by hand instead.
    match provider.delete_credentials(&name).await {
        Ok(0) => {}
        Ok(n) => ctx
            .progress
            .line(format!("deleted {n} autostop credential(s) of `{name}`")),
        Err(e) => ctx.progress.line(format!(
            "warning: could not look for `{name}`'s autostop credentials ({}); delete any application credential named hvd-cluster-{name}-autostop-N by hand",
            input::shown_message(&e.to_string(), 300)
        )),
    }
    // Prove it through the API before forgetting the cluster.
    let left = provider.observe(&name).await.map_err(ApplyError::Observe)?;
    if !left.is_empty() {
        let names: Vec<String> = left
            .iter()
            .map(|o| format!("{} {}", o.kind, input::shown(&o.name)))
            .collect();
        return Err(Error::Runtime(format!(
            "still present after delete: {}",
            names.join(", ")
        )));
    }
    drop(lock);
    dir.remove()?;
    ctx.progress.line(format!(
        "deleted after {:.1}s, {} API calls",
        started.elapsed().as_secs_f64(),
        provider.calls()
    ));
    println!("cluster `{name}`: deleted; nothing tagged with it is left");
    Ok(0)
}
