//! `check`: the acceptance check on a running cluster (containers, /shared, Jupyter, an
//! allreduce over every slot).

use std::path::Path;

use super::output::{emit, print_check};
use crate::check;
use crate::cluster;
use crate::context::Context;
use crate::error::Error;

pub async fn check(ctx: &Context, file: &Path, json: bool) -> Result<u8, Error> {
    let existing = cluster::existing(ctx, file).await?;
    let p = &existing.profile;
    let opened = existing.open(ctx).await?;
    let url = opened.jupyter_url(p, existing.provider.as_ref()).await?;
    let report = check::run(p, &opened.sessions, Some(url.at())).await?;
    emit(json, &report, || print_check(&report));
    Ok(0)
}
