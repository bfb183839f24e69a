//! `start`: brings a stopped cluster back: starts its servers (the master first), then the
//! same converge, bootstrap and check as `up`, which find the disks as `stop` left them and
//! change only what they must; prints the Jupyter URL. Only for a cluster this machine knows
//! (`up` makes new ones, and also starts a stopped cluster).

use std::path::Path;

use crate::context::Context;
use crate::error::Error;
use crate::profile;
use crate::state::ClusterDir;

pub async fn start(ctx: &Context, file: &Path) -> Result<u8, Error> {
    let p = profile::load(file)?;
    let known = ClusterDir::look(&ctx.state_root, &p.name)?.load()?;
    if known.nodes.is_empty() {
        return Err(Error::Usage(format!(
            "no cluster `{}` is known here to start: `hvd-cluster up {}` creates it (or finds \
             it, stopped or not, when it was made elsewhere)",
            p.name,
            super::shown_path(file)
        )));
    }
    super::up::up(ctx, file, false).await
}
