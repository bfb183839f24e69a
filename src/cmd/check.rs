//! `check`: the acceptance check on a running cluster (containers, /shared, Jupyter, an
//! allreduce over every slot). Refused while a job is queued or running (it takes the same
//! slots).

use std::path::Path;

use super::jobs::refuse_beside_jobs;
use super::output::{emit, print_check};
use crate::check;
use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::input;

pub async fn check(ctx: &Context, file: &Path, json: bool) -> Result<u8, Error> {
    let existing = cluster::existing(ctx, file).await?;
    let p = &existing.profile;
    let opened = existing.open(ctx).await?;
    // Its horovodrun takes every slot: never beside a job.
    refuse_beside_jobs(
        opened.master(),
        &p.name,
        &input::shown(&file.to_string_lossy()),
        "check",
    )
    .await?;
    let url = opened.jupyter_url(p, existing.provider.as_ref()).await?;
    let report = check::run(p, &opened.sessions, Some(url.at())).await?;
    emit(json, &report, || print_check(&report));
    Ok(0)
}
