//! `check`: the acceptance check on a running cluster (containers, /shared, Jupyter, an
//! allreduce over every slot). Refused while a job is queued or running (it takes the same
//! slots); a job submitted while it runs waits for it.

use std::path::Path;

use super::jobs::{refuse_beside_jobs, slots_taken};
use super::output::{emit, print_check};
use crate::check::{self, CheckError};
use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::jobs::SlotClaim;

pub async fn check(ctx: &Context, file: &Path, json: bool) -> Result<u8, Error> {
    let existing = cluster::existing(ctx, file).await?;
    let p = &existing.profile;
    let opened = existing.open(ctx).await?;
    // Its horovodrun takes every slot: never beside a job.
    let shown = input::shown(&file.to_string_lossy());
    refuse_beside_jobs(opened.master(), &p.name, &shown, "check").await?;
    let url = opened.jupyter_url(p, existing.provider.as_ref()).await?;
    let report = match check::run(p, &opened.sessions, Some(url.at()), SlotClaim::Alone).await {
        Err(CheckError::SlotsTaken(refusal)) => {
            return Err(slots_taken(&refusal, &p.name, &shown, "check"))
        }
        done => done?,
    };
    emit(json, &report, || print_check(&report));
    Ok(0)
}
