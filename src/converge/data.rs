//! The data a converge brings along: the profile's `[[data]]` pushed to /shared, and what was
//! staged on every node staged onto the nodes that lack it, before discovery lists them.

use crate::bootstrap;
use crate::context::Context;
use crate::error::Error;
use crate::profile::{DataSource, Profile};
use crate::provider::Provider;
use crate::state::ClusterDir;
use crate::transfer;
use crate::transfer::objects::CredentialOutcome;

/// The profile's `[[data]]` into /shared: a local folder from this machine, as `push` sends it
/// (only what is new or changed: a converge of an unchanged tree sends no file); the objects
/// of the object store by the master itself, with the read-only credential put there first
/// (and removed once no entry needs it). Entries with `stage = true` join what is staged on
/// every node. A local path that is not here (a `start` from another machine) is said, and
/// /shared left as it is.
pub(super) async fn deliver(
    ctx: &Context,
    p: &Profile,
    provider: &dyn Provider,
    dir: &ClusterDir,
    master: &bootstrap::NodeSession,
) -> Result<(), Error> {
    match transfer::objects::converge_credential(p, provider, &master.ssh).await? {
        CredentialOutcome::Installed(name) => ctx.progress.line(format!(
            "data: the master reads the object store with credential {name}, limited to reading the [[data]] containers"
        )),
        CredentialOutcome::Removed => ctx
            .progress
            .line("data: no entry reads the object store any more; the master's credential is gone"),
        CredentialOutcome::None | CredentialOutcome::InPlace => {}
    }
    for d in &p.data {
        let remote = d
            .shared_path()
            .map_err(|e| Error::Usage(format!("[[data]]: {}", e.0)))?;
        match d
            .source()
            .map_err(|e| Error::Usage(format!("[[data]]: {}", e.0)))?
        {
            DataSource::ObjectStore(source) => {
                let fetched =
                    transfer::objects::fetch(&master.ssh, &source, &remote, &ctx.progress).await?;
                ctx.progress.line(format!(
                    "data: {}",
                    transfer::objects::summary(&source, &remote, &fetched)
                ));
            }
            DataSource::Local(local) if local.symlink_metadata().is_err() => {
                ctx.progress.line(format!(
                    "data: {} is not on this machine; {remote} left as it is",
                    transfer::tree::shown_path(local)
                ));
            }
            DataSource::Local(local) => {
                let opts = transfer::Options::default();
                let source = transfer::Source::read(local, &opts)?;
                let summary =
                    transfer::push(&master.ssh, source, &remote, &opts, &ctx.progress).await?;
                ctx.progress.line(format!("data: {summary}"));
            }
        }
        if d.stage {
            let mut st = dir.load()?;
            if !st.staged.iter().any(|s| s == remote.as_str()) {
                st.staged.push(remote.as_str().to_string());
                dir.save(&st)?;
            }
        }
    }
    Ok(())
}

/// The bytes the profile's local `[[data]]` entries bring to /shared, read as `push` reads
/// them (ignore files honoured; links count nothing); an entry not on this machine counts
/// nothing (it is said when the converge comes to it).
pub(super) async fn local_bytes(p: &Profile) -> Result<u64, Error> {
    let mut roots = Vec::new();
    for d in &p.data {
        if let Ok(DataSource::Local(local)) = d.source() {
            if local.symlink_metadata().is_ok() {
                roots.push(local.to_path_buf());
            }
        }
    }
    if roots.is_empty() {
        return Ok(0);
    }
    let total = tokio::task::spawn_blocking(move || {
        let excludes = transfer::tree::Excludes::new(&[])?;
        let opts = transfer::tree::ScanOptions {
            ignore_files: true,
            excludes: &excludes,
            hashes: false,
        };
        let mut total = 0u64;
        for root in &roots {
            for e in transfer::tree::scan(root, &opts)? {
                if e.kind == transfer::diff::EntryKind::File {
                    total += e.size;
                }
            }
        }
        Ok::<u64, transfer::TransferError>(total)
    })
    .await
    .map_err(|e| Error::Runtime(format!("[[data]]: reading the local trees: {e}")))??;
    Ok(total)
}

/// Whether `bytes` of `[[data]]` can land on a /shared of `gb` GiB held by `holder`: refused
/// in one line before anything is made when they cannot (what is on it already only adds).
/// Pure.
pub(super) fn fits_shared(bytes: u64, holder: &str, gb: u64) -> Result<(), String> {
    let room = gb.saturating_mul(1 << 30);
    if bytes <= room {
        return Ok(());
    }
    Err(format!(
        "[[data]]: {:.2} GiB of local entries go to /shared, more than the {gb} GiB of {holder}; \
         give /shared more room or send less",
        bytes as f64 / f64::from(1u32 << 30)
    ))
}

/// Stages what `stage` copied onto every node (kept in the cluster's state) onto the nodes
/// that lack it: a worker `scale` or `heal` added, a blank ephemeral disk after `start`. Only
/// those nodes take part; a node that has it costs one manifest. A source gone from /shared
/// is said and forgotten; any other failure stops the command (the new nodes would join
/// without their data).
pub(super) async fn restage(
    ctx: &Context,
    dir: &ClusterDir,
    sessions: &[bootstrap::NodeSession],
) -> Result<(), Error> {
    let st = dir.load()?;
    let mut forgotten = Vec::new();
    for raw in &st.staged {
        let source = match transfer::paths::SharedPath::parse(raw) {
            Ok(s) => s,
            Err(e) => {
                ctx.progress.line(format!(
                    "stage: {} in the cluster's state is not a path below /shared ({}); forgotten",
                    crate::input::shown(raw),
                    e.0
                ));
                forgotten.push(raw.clone());
                continue;
            }
        };
        let opts = transfer::Options::default();
        match transfer::stage(sessions, &source, &opts, &ctx.progress).await {
            Ok(summary) => ctx.progress.line(summary.to_string()),
            Err(transfer::TransferError::Missing(_)) => {
                ctx.progress.line(format!(
                    "stage: {source} is no longer on /shared; new nodes do not get it (forgotten)"
                ));
                forgotten.push(raw.clone());
            }
            Err(e) => return Err(e.into()),
        }
    }
    if !forgotten.is_empty() {
        let mut st = dir.load()?;
        st.staged.retain(|s| !forgotten.contains(s));
        dir.save(&st)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fits_shared;

    #[test]
    fn data_larger_than_shared_is_refused_with_both_sizes() {
        assert_eq!(fits_shared(0, "its share (storage.size_gb)", 1), Ok(()));
        assert_eq!(fits_shared(1 << 30, "volume `datasets`", 1), Ok(()));
        let e = fits_shared((1 << 30) + 1, "volume `datasets`", 1).unwrap_err();
        assert!(
            e.starts_with("[[data]]: 1.00 GiB of local entries go to /shared, more than the 1 GiB of volume `datasets`"),
            "{e}"
        );
        let big = fits_shared(5 << 30, "its share (storage.size_gb)", 2).unwrap_err();
        assert!(
            big.contains("5.00 GiB") && big.contains("the 2 GiB of its share"),
            "{big}"
        );
        assert!(fits_shared(u64::MAX, "x", u64::MAX).is_ok(), "no overflow");
    }
}
