//! `plan`: names resolved, quotas checked, and what `up` would create, keep or delete;
//! changes nothing (exit 10 when there are changes).

use std::path::Path;

use super::output::{emit, PlanReport};
use super::PLAN_HAS_CHANGES;
use crate::context::Context;
use crate::converge;
use crate::error::Error;
use crate::profile;
use crate::state::ClusterDir;

pub async fn plan(ctx: &Context, file: &Path, json: bool) -> Result<u8, Error> {
    let mut p = profile::load(file)?;
    // `plan` only looks: a cluster not made yet gets no folder from it.
    let dir = ClusterDir::look(&ctx.state_root, &p.name)?;
    let provider = converge::connect(ctx, &mut p).await?;
    let converge::Prepared {
        plan,
        shortfalls,
        warnings,
        ..
    } = converge::prepare(ctx, &p, &dir, provider.as_ref()).await?;
    converge::show_warnings(ctx, &warnings);
    let disks = provider.disks(&p);
    let report = PlanReport {
        cluster: &p.name,
        plan: &plan,
        counts: plan.counts(),
        quota_shortfalls: &shortfalls,
        warnings: &warnings,
        disks: &disks,
    };
    emit(json, &report, || {
        println!("cluster `{}`:\n{plan}", p.name);
        if !disks.is_empty() {
            println!("disks:");
            for line in &disks {
                println!("  {line}");
            }
        }
    });
    if !shortfalls.is_empty() {
        return Err(Error::Quota(shortfalls));
    }
    Ok(if plan.is_noop() { 0 } else { PLAN_HAS_CHANGES })
}
