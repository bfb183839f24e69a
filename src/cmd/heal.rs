//! `heal`: finds workers that are gone or broken (server deleted, SHUTOFF or ERROR, container
//! down, SSH dead), drops them from discovery, replaces them under new names, and lists the
//! replacements once they pass the check. `--watch` repeats it every interval.

use std::path::Path;
use std::time::Duration;

use crate::context::Context;
use crate::converge;
use crate::error::Error;
use crate::plan;
use crate::profile;
use crate::state::ClusterDir;

pub async fn heal(ctx: &mut Context, file: &Path, watch: Option<Duration>) -> Result<u8, Error> {
    ctx.probe_workers = true;
    loop {
        let mut p = profile::load(file)?;
        let dir = ClusterDir::open(&ctx.state_root, &p.name)?;
        let provider = converge::connect(ctx, &mut p).await?;
        let prepared = converge::prepare(ctx, &p, &dir, provider.as_ref()).await?;
        let stopped = prepared
            .observed
            .resources
            .iter()
            .filter(|o| o.kind == plan::Kind::Server && o.health.is_stopped())
            .count();
        if stopped > 0 {
            // `stop` was meant: healing would start it again.
            println!("heal: the cluster is stopped ({stopped} server(s)); nothing to heal");
            match watch {
                Some(every) => {
                    tokio::time::sleep(every).await;
                    continue;
                }
                None => return Ok(0),
            }
        }
        let plan = prepared.plan;
        let broken: Vec<String> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                plan::Action::Replace { old, reason, .. } => {
                    Some(format!("{} ({reason})", old.name))
                }
                plan::Action::Create { desired } if desired.kind() == plan::Kind::Server => {
                    Some(format!("{} (missing)", desired.name))
                }
                _ => None,
            })
            .collect();
        if broken.is_empty() {
            println!("heal: every node is healthy");
        } else {
            println!("heal: found {}", broken.join(", "));
            super::up::up(ctx, file, false).await?;
            println!("heal: replaced {} node(s)", broken.len());
        }
        match watch {
            Some(every) => tokio::time::sleep(every).await,
            None => return Ok(0),
        }
    }
}
