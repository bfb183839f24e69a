//! `up`: create or converge the cluster, bootstrap every node, check, print the Jupyter URL.

use std::path::Path;

use super::{Context, Error};
use crate::converge;

pub async fn up(ctx: &Context, file: &Path, infra_only: bool) -> Result<u8, Error> {
    converge::converge(ctx, file, infra_only).await
}
