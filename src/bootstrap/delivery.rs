//! The Image step: the Horovod image on every node that lacks it (by id), by the profile's
//! `container.source`: `pull` from a registry by the master, whose copy goes down the fan-out
//! tree (or by every node, with `container.pull = "every-node"`); `transfer` and `build` sent
//! once from this machine
//! to the master over SSH ([`super::upload`]), then down the fan-out tree
//! ([`super::image::fan_out_image`]); `build-remote` built on the master
//! ([`super::remote_build`], run by the bootstrap before this step). Nodes that already hold
//! the image get nothing: a second `up` sends no byte.

use futures::future::try_join_all;

use super::archive::{kept_line, master_load_command, reusable_archive, settle_archive, ImageFile};
use super::image::{fan_out_image, lacking, local_has_zstd, local_image_id, IMAGE_PORT};
use super::mirror;
use super::room::{self, PullRoom};
use super::upload::{upload_early, Uploaded};
use super::{bar_of, BootstrapError, Inputs, NodeSession};
use crate::profile::{ImageSource, PullFrom};
use crate::progress::Progress;
use crate::registry::{self, PullAccess};
use crate::ssh;

/// Gets the Horovod image onto every node that lacks it: `pull` on each node, or `transfer`:
/// sent once from this machine to the master ([`upload_early`], already done when `early`),
/// loaded there while it goes down the fan-out tree over the private network (one copy over
/// the user's link, at most `inputs.fanout` copies out of any node).
pub(super) async fn ensure_image(
    inputs: &Inputs<'_>,
    sessions: &[NodeSession],
    bars: &[indicatif::ProgressBar],
    progress: &Progress,
    early: Option<Uploaded>,
) -> Result<usize, BootstrapError> {
    let p = inputs.profile;
    let image = &p.container.image;
    // A pulled image is the registry's: this machine's copy under the tag says nothing.
    let want = match p.container.source {
        ImageSource::Pull => None,
        _ => local_image_id(image).await,
    };
    let missing = lacking(image, want.as_deref(), sessions).await?;
    if missing.is_empty() {
        return Ok(0);
    }
    let started = std::time::Instant::now();
    // A pull by tag for workers goes through the master's mirror; by digest, the master's
    // copy goes down the tree; the master alone pulls for itself.
    // Whether the master's archive is the image whole, once asked (by the pull's room check).
    let mut archive_kept: Option<bool> = None;
    let mut upstream = mirror::upstream_of(image)
        .filter(|_| missing.iter().any(|s| s.node.name != sessions[0].node.name));
    if p.container.source == ImageSource::Pull {
        // Room first: before a byte is pulled, with the sizes in the registry's manifest, read
        // by a node that pulls (the master, or with every-node pulls the first that lacks it).
        let master = &sessions[0];
        let every_node = p.container.pull == PullFrom::EveryNode;
        let reader = if every_node { missing[0] } else { master };
        let way = match (every_node, &upstream) {
            (true, _) => PullRoom::EveryNode,
            (false, Some(_)) => PullRoom::Mirror,
            (false, None) => PullRoom::MasterArchive,
        };
        match registry_bytes(reader, image, inputs.pull_access.as_ref(), progress).await {
            Some(Ok(compressed)) => {
                // the master's archive kept whole from an earlier delivery needs no room
                if way == PullRoom::MasterArchive
                    && !missing.iter().any(|s| s.node.name == master.node.name)
                {
                    archive_kept = Some(reusable_archive(master, image, PULLED_ARCHIVE).await?);
                }
                let kept = archive_kept.unwrap_or(false);
                room::check_pull(image, master, &missing, way, compressed, kept).await?
            }
            // The registry refuses this command's access (`scale` from a shell without the
            // credentials), and the master holds the image: the workers get the master's copy
            // down the tree, as from a master alone.
            Some(Err(()))
                if !every_node && !missing.iter().any(|s| s.node.name == master.node.name) =>
            {
                upstream = None;
            }
            // `docker manifest inspect` says "no such manifest" also for refused credentials:
            // a pull on that node says which, in the registry's own words (or pulls the image)
            Some(Err(())) => {
                let bar = bar_of(sessions, bars, reader);
                pull_on(reader, bar, image, inputs.pull_access.as_ref(), progress).await?;
            }
            None => {}
        }
    }
    match (p.container.source, &upstream) {
        (ImageSource::Pull, _) if p.container.pull == PullFrom::EveryNode => {
            try_join_all(missing.iter().map(|s| {
                let bar = bar_of(sessions, bars, s);
                pull_on(s, bar, image, inputs.pull_access.as_ref(), progress)
            }))
            .await?;
        }
        // One copy from the registry per cluster, every node pulling at once from the
        // master's mirror of it.
        (ImageSource::Pull, Some(upstream)) => {
            mirror::deliver(
                sessions,
                &missing,
                bars,
                image,
                upstream,
                inputs.pull_access.as_ref(),
                progress,
            )
            .await?;
        }
        // The master alone, or by digest: the master pulls, the workers get the master's copy
        // down the fan-out tree over the private network.
        (ImageSource::Pull, None) => {
            let master = &sessions[0];
            if missing.iter().any(|s| s.node.name == master.node.name) {
                pull_on(
                    master,
                    &bars[0],
                    image,
                    inputs.pull_access.as_ref(),
                    progress,
                )
                .await?;
            }
            let workers: Vec<&NodeSession> = missing
                .iter()
                .copied()
                .filter(|s| s.node.name != master.node.name)
                .collect();
            if !workers.is_empty() {
                bars[0].set_message(format!(
                    "serving {image} to {} worker(s) on port {IMAGE_PORT}",
                    workers.len()
                ));
                let file = PULLED_ARCHIVE;
                let kept = match archive_kept {
                    Some(kept) => kept,
                    None => reusable_archive(master, image, file).await?,
                };
                if kept {
                    progress.line(kept_line(master));
                }
                let fanned =
                    fan_out_image(master, &workers, image, file, kept, inputs.fanout).await;
                settle_archive(master, file).await;
                for line in fanned? {
                    progress.line(&line);
                }
            }
        }
        // built on the master instead (super::remote_build), never sent from here
        (ImageSource::BuildRemote, _) => return Ok(0),
        (ImageSource::Transfer | ImageSource::Build, _) => {
            if want.is_none() {
                return Err(BootstrapError::Other(format!(
                    "the image {image} is not on this machine; build it first (the local provider does so on `up`), or set container.source = \"pull\""
                )));
            }
            let master = &sessions[0];
            let master_lacks = missing.iter().any(|s| s.node.name == master.node.name);
            let workers: Vec<&NodeSession> = missing
                .iter()
                .copied()
                .filter(|s| s.node.name != master.node.name)
                .collect();
            // The master's file: what `upload_early` sent, or sent now (the master lacked the
            // image only once Docker could tell), or (the master has the image, a worker
            // does not) saved on the master by `fan_out_image`.
            let uploaded = match early {
                Some(u) => Some(u),
                None if master_lacks => {
                    bars[0].set_message(format!("sending {image} to the master"));
                    upload_early(inputs, sessions, progress, false).await?
                }
                None => None,
            };
            let file = match &uploaded {
                Some(u) => u.file,
                None => ImageFile {
                    zstd: local_has_zstd().await,
                },
            };
            // Only workers lack it: the master serves the archive it kept whole from an
            // earlier delivery, or saves one for them (room checked here; an upload checked
            // every node before it sent a byte).
            let received = uploaded.is_some();
            let kept = !received && reusable_archive(master, image, file).await?;
            if !received {
                room::check_delivery(image, master, &workers, file.zstd, kept).await?;
            }
            if kept {
                progress.line(kept_line(master));
            }
            bars[0].set_message(format!(
                "loading {image}; serving it to {} worker(s) on port {IMAGE_PORT}",
                workers.len()
            ));
            // The master loads the file it received while the workers fetch it: under
            // emulation `docker load` is the slow part, so the two overlap. A whole upload
            // stays for `scale` and `heal`, recorded by the image's id there.
            let whole = uploaded.as_ref().is_some_and(|u| u.whole);
            let master_load = async {
                if !received {
                    return Ok(None);
                }
                let started = std::time::Instant::now();
                master
                    .ssh
                    .sudo(&master_load_command(&ssh::shell_quote(image), file, whole))
                    .await
                    .map(|_| Some(started.elapsed().as_secs_f64()))
            };
            let fan_out = async {
                if workers.is_empty() {
                    return Ok(Vec::new());
                }
                fan_out_image(
                    master,
                    &workers,
                    image,
                    file,
                    received || kept,
                    inputs.fanout,
                )
                .await
            };
            let (loaded, fanned) = tokio::join!(master_load, fan_out);
            settle_archive(master, file).await;
            if let Some(secs) = loaded? {
                progress.line(format!("{}: docker load {secs:.1}s", master.node.name));
            }
            for line in fanned? {
                progress.line(&line);
            }
        }
    }
    progress.line(format!(
        "image on the {} node(s) that lacked it after {:.1}s",
        missing.len(),
        started.elapsed().as_secs_f64()
    ));
    Ok(1)
}

/// The archive the master saves of a pulled image for the workers: every node has zstd (the
/// docker step installs it).
const PULLED_ARCHIVE: ImageFile = ImageFile { zstd: true };

/// `docker ARGS IMAGE` as root on a node, with the registry's CA (when the profile names one)
/// in Docker's `certs.d` for that registry and the credentials (when there are any) in a
/// Docker config made for this one command: sent on the command's stdin (never in an
/// argument or a log), in a private folder under /run that the same command removes, whatever
/// its outcome. `args` are ours (no input); the image is quoted. Returns its stdout.
async fn docker_with_access(
    node: &NodeSession,
    image: &str,
    access: Option<&PullAccess>,
    args: &str,
) -> Result<String, ssh::SshError> {
    let registry = registry::registry_of(image);
    if let Some(ca) = access.and_then(|a| a.ca_pem.as_deref()) {
        node.ssh
            .write_file(
                &format!("/etc/docker/certs.d/{registry}/ca.crt"),
                ca.as_bytes(),
                0o644,
            )
            .await?;
    }
    let config = access
        .and_then(|a| a.credentials.as_ref())
        .map(|c| c.docker_config_json())
        .unwrap_or_default();
    // Left by a command that was killed before its trap ran: nothing of it may stay.
    let script = format!(
        "set -e
rm -rf /run/hvd-cluster-pull.*
d=$(mktemp -d /run/hvd-cluster-pull.XXXXXX)
         trap 'rm -rf \"$d\"' EXIT
umask 077
cat > \"$d/config.json\"
         DOCKER_CONFIG=$d docker {args} {}
",
        ssh::shell_quote(image)
    );
    let command = format!("sudo -n bash -c {}", ssh::shell_quote(&script));
    node.ssh.pipe_into(&command, config.as_bytes()).await
}

/// The image's compressed size from the registry's manifest, read on `node` with the pull's
/// CA and credentials: `Some(Ok(bytes))`; `Some(Err(()))` when the registry refused the image
/// (credentials, or no such image); `None` (said in a line: the room goes unchecked) when the
/// registry or this node's Docker does not tell.
async fn registry_bytes(
    node: &NodeSession,
    image: &str,
    access: Option<&PullAccess>,
    progress: &Progress,
) -> Option<Result<u64, ()>> {
    let answer = docker_with_access(node, image, access, "manifest inspect --verbose").await;
    let bytes = answer.as_deref().ok().and_then(room::manifest_bytes);
    if bytes.is_none() {
        let why = match answer {
            Ok(_) => "no linux/amd64 manifest with sizes".to_string(),
            Err(ssh::SshError::Command { stderr, .. }) if registry::registry_refused(&stderr) => {
                return Some(Err(()))
            }
            Err(ssh::SshError::Command { stderr, .. }) => {
                crate::input::shown_message(stderr.trim(), 160)
            }
            Err(e) => crate::input::shown_message(&e.to_string(), 160),
        };
        progress.line(format!(
            "{}: the room for {image} is not checked: its manifest says no size ({why})",
            node.node.name
        ));
    }
    bytes.map(Ok)
}

/// `docker pull` on a node (the master, or every node with `container.pull = "every-node"`), with the registry's CA (when the profile names one) in
/// Docker's `certs.d` for that registry, and the credentials (when there are any) in a
/// Docker config made for this one pull: sent on the command's stdin (never in an argument
/// or a log), in a private folder under /run that the same command removes, whatever the
/// pull's outcome. A failed pull is explained in one line.
async fn pull_on(
    node: &NodeSession,
    bar: &indicatif::ProgressBar,
    image: &str,
    access: Option<&PullAccess>,
    progress: &Progress,
) -> Result<(), BootstrapError> {
    bar.set_message(format!("docker pull {image}"));
    let started = std::time::Instant::now();
    let credentials = access.and_then(|a| a.credentials.as_ref());
    docker_with_access(node, image, access, "pull -q")
        .await
        .map(drop)
        .map_err(|e| match e {
            // what Docker said: the registry's answer, never the credentials
            ssh::SshError::Command { stderr, .. } => BootstrapError::Other(format!(
                "{}: {}",
                node.node.name,
                registry::explain_pull_failure(image, credentials.is_some(), &stderr)
            )),
            other => other.into(),
        })?;
    progress.line(format!(
        "{}: pulled {image} in {:.1}s",
        node.node.name,
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}
