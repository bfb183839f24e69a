//! `stop`: stops every server of the cluster (workers first, the master last) so that it
//! holds no vCPUs, RAM or GPUs, keeping everything else (disks, addresses, network, security
//! groups, keys, the share and /shared), and says what it handed back. Safe to interrupt and
//! repeat. `start` (or `up`) brings the same cluster back. A queued or running job on the
//! master stops it, unless `--force` (the job is then recorded interrupted). The image's
//! archive the master keeps for `scale` and `heal` is removed first: it would go into the
//! master's shelve snapshot.

use super::jobs::before_stop;
use super::output::{emit, print_stopped};
use crate::cluster::{self, Target};
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::lifecycle;
use crate::plan::Kind;

pub async fn stop(ctx: &Context, target: Target, force: bool, json: bool) -> Result<u8, Error> {
    let started = std::time::Instant::now();
    // How the refusal names the cluster in the commands it suggests.
    let shown = match &target {
        Target::Profile(file) => input::shown(&file.to_string_lossy()),
        Target::Cluster { .. } => "PROFILE".to_string(),
    };
    let (name, dir, provider) = cluster::target(ctx, target).await?;
    let _lock = dir.lock()?;
    // One listing for both: the look for jobs and the stop.
    let servers = provider.poll(&name, Kind::Server).await?;
    before_stop(ctx, &dir, provider.as_ref(), &servers, &name, &shown, force).await?;
    let report = lifecycle::stop(ctx, provider.as_ref(), &name, &servers).await?;
    ctx.progress.line(format!(
        "stopped after {:.1}s, {} API calls",
        started.elapsed().as_secs_f64(),
        provider.calls()
    ));
    emit(json, &report, || print_stopped(&name, &report));
    Ok(0)
}
