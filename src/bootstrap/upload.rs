//! The image's first leg: `docker save` here, compressed with zstd, over SSH into a file on
//! the master, started beside the node steps (it needs only SSH and the master's disk), and
//! without the layers every node that lacks the image already holds ([`super::layers`]).

use std::collections::HashSet;
use std::process::Stdio;

use futures::future::try_join_all;

use super::archive::{drop_archives_command, ImageFile};
use super::image::{lacking, local_has_zstd, local_image_id, Transfer};
use super::room;
use super::{layers, BootstrapError, Inputs, NodeSession};
use crate::profile::ImageSource;
use crate::progress::Progress;
use crate::ssh;

/// The image on the master's disk, sent while the nodes were still installing Docker.
#[derive(Debug, Clone, PartialEq)]
pub struct Uploaded {
    pub file: ImageFile,
    pub transfer: Transfer,
    /// No layer left out: the file is the image for any node (kept for `scale` and `heal`).
    pub whole: bool,
}

/// The first leg, started beside the node steps (it needs only SSH and the master's disk,
/// not Docker): when the image goes by `transfer`/`build` and the master lacks it, `docker
/// save` here, compressed, into a file on the master, leaving out the layers every node that
/// lacks the image already holds. `None` when there is nothing to send (or nothing here to
/// send: [`ensure_image`] then says why).
///
/// Before a byte is sent, every node that lacks the image is asked for its room
/// ([`room::check_delivery`]). `early` (beside the node steps) gives way when a node that lacks the
/// image has an ephemeral disk: its data disk step makes the room, and moves /var/tmp, first.
pub(super) async fn upload_early(
    inputs: &Inputs<'_>,
    sessions: &[NodeSession],
    progress: &Progress,
    early: bool,
) -> Result<Option<Uploaded>, BootstrapError> {
    let p = inputs.profile;
    if matches!(
        p.container.source,
        ImageSource::Pull | ImageSource::BuildRemote
    ) {
        return Ok(None);
    }
    let image = &p.container.image;
    let Some(want) = local_image_id(image).await else {
        return Ok(None);
    };
    let missing = lacking(image, Some(&want), sessions).await?;
    let master = &sessions[0];
    if !missing.iter().any(|s| s.node.name == master.node.name) {
        return Ok(None);
    }
    if early && missing.iter().any(|s| s.node.ephemeral_gb > 0) {
        return Ok(None);
    }
    // Every node installs zstd with Docker (the docker step's check requires it), so only this
    // machine decides whether the image travels compressed.
    let file = ImageFile {
        zstd: local_has_zstd().await,
    };
    // The master lacks the image: any archive it kept is stale, and goes before its room is read.
    master.ssh.sudo(&drop_archives_command()).await?;
    room::check_delivery(image, master, &missing, file.zstd, false).await?;
    // Layers every receiver already holds (an earlier build of the image) stay out of the
    // archive: `docker load` never reads them. A node without Docker yet holds none.
    let shared = shared_layers(image, &missing).await?;
    if shared.count > 0 {
        progress.line(format!(
            "{}: {} of {} layer(s) already on every node that lacks the image; not sending them",
            master.node.name, shared.count, shared.of
        ));
    }
    let bar = progress.spinner("image");
    let transfer = send_image_to_master(master, image, file, shared.count, &bar).await?;
    progress.line(format!("{}: {}", master.node.name, transfer.describe()));
    Ok(Some(Uploaded {
        file,
        transfer,
        whole: shared.count == 0,
    }))
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counting<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let added = buf.filled().len().saturating_sub(before) as u64;
        self.count
            .fetch_add(added, std::sync::atomic::Ordering::Relaxed);
        polled
    }
}

/// The command the master runs on the image stream from this machine: kept as it came, in
/// the file it loads and the workers fetch (a partial file from an interrupted `up` is
/// replaced; the id beside an earlier one goes first).
pub fn master_receive_command(file: ImageFile) -> String {
    let script = format!(
        "set -e -o pipefail; rm -f {}; cat > {}",
        file.id_path(),
        file.path()
    );
    format!("sudo -n bash -c {}", ssh::shell_quote(&script))
}

/// How many of the image's bottom layers every receiver holds already.
struct SharedLayers {
    count: usize,
    of: usize,
}

/// The image's layer diff IDs here, and the layer lists of every image on each receiver
/// (read from the node and parsed as JSON, like anything a node says).
async fn shared_layers(
    image: &str,
    receivers: &[&NodeSession],
) -> Result<SharedLayers, BootstrapError> {
    let out = tokio::process::Command::new("docker")
        .args(["image", "inspect", "-f", "{{json .RootFS.Layers}}", image])
        .output()
        .await
        .map_err(|e| BootstrapError::Other(format!("docker image inspect {image}: {e}")))?;
    let Ok(want) = serde_json::from_slice::<Vec<String>>(&out.stdout) else {
        return Ok(SharedLayers { count: 0, of: 0 });
    };
    let lists = try_join_all(receivers.iter().map(|s| async move {
        let text = s
            .ssh
            .sudo(
                "ids=$(docker image ls -q --no-trunc 2>/dev/null | sort -u); \
                 [ -z \"$ids\" ] || docker image inspect -f '{{json .RootFS.Layers}}' $ids 2>/dev/null || true",
            )
            .await?;
        Ok::<_, BootstrapError>(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Vec<String>>(l).ok())
                .collect::<Vec<_>>(),
        )
    }))
    .await?;
    Ok(SharedLayers {
        count: layers::present_prefix(&want, &lists),
        of: want.len(),
    })
}

/// The layer files (archive paths) of the image's bottom `count` layers, read from a first
/// `docker save` pass (the manifest comes last in the archive).
async fn layer_files(image: &str, count: usize) -> Result<HashSet<String>, BootstrapError> {
    let mut save = tokio::process::Command::new("docker")
        .args(["save", image])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BootstrapError::Other(format!("docker save {image}: {e}")))?;
    let saved = save
        .stdout
        .take()
        .ok_or_else(|| BootstrapError::Other("docker save gave no output".into()))?;
    let read = layers::filter_tar(saved, None::<tokio::io::Sink>, &HashSet::new(), true)
        .await
        .map_err(|e| BootstrapError::Other(e.to_string()))?;
    let _ = save.wait().await;
    let manifest = read
        .manifest
        .ok_or_else(|| BootstrapError::Other(format!("docker save {image}: no manifest.json")))?;
    let files =
        layers::manifest_layers(&manifest).map_err(|e| BootstrapError::Other(e.to_string()))?;
    Ok(files.into_iter().take(count).collect())
}

/// `docker save` here, over SSH to the master's `docker load`: zstd at a fast level when
/// both ends have it (SSH is the slow part under emulation), else as it is; without the
/// files of the bottom `skip_layers` layers (every receiver holds them).
async fn send_image_to_master(
    master: &NodeSession,
    image: &str,
    file: ImageFile,
    skip_layers: usize,
    bar: &indicatif::ProgressBar,
) -> Result<Transfer, BootstrapError> {
    let fail =
        |what: &str, e: &dyn std::fmt::Display| BootstrapError::Other(format!("{what}: {e}"));
    let left_out = if skip_layers > 0 {
        layer_files(image, skip_layers).await?
    } else {
        HashSet::new()
    };
    let mut save = tokio::process::Command::new("docker")
        .args(["save", image])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(&format!("docker save {image}"), &e))?;
    let saved = save
        .stdout
        .take()
        .ok_or_else(|| BootstrapError::Other("docker save gave no output".into()))?;
    // The archive as it leaves this machine: the save itself (process to process), or the
    // save without the dropped layers' files, filtered here as it streams.
    let mut filter = None;
    let mut unfiltered = None;
    let (archive_stdio, archive_reader): (
        Stdio,
        Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>,
    ) = if left_out.is_empty() {
        if file.zstd {
            (saved.try_into().map_err(|e| fail("docker save", &e))?, None)
        } else {
            unfiltered = Some(saved);
            (Stdio::null(), None)
        }
    } else {
        let (tx, rx) = tokio::io::duplex(1 << 20);
        let left_out = left_out.clone();
        filter = Some(tokio::spawn(async move {
            layers::filter_tar(saved, Some(tx), &left_out, false).await
        }));
        (Stdio::piped(), Some(Box::new(rx)))
    };
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = std::time::Instant::now();
    let mut compressor = None;
    let mut feeder = None;
    let stream: Box<dyn tokio::io::AsyncRead + Unpin + Send> = if file.zstd {
        let mut z = tokio::process::Command::new("zstd")
            .args(["-1", "-T0", "-q", "-c"])
            .stdin(archive_stdio)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail("zstd", &e))?;
        if let (Some(mut reader), Some(mut stdin)) = (archive_reader, z.stdin.take()) {
            feeder = Some(tokio::spawn(async move {
                let copied = tokio::io::copy(&mut reader, &mut stdin).await;
                drop(stdin); // the end of zstd's input
                copied
            }));
        }
        let out = z
            .stdout
            .take()
            .ok_or_else(|| BootstrapError::Other("zstd gave no output".into()))?;
        compressor = Some(z);
        Box::new(out)
    } else if let Some(reader) = archive_reader {
        reader
    } else if let Some(saved) = unfiltered {
        Box::new(saved)
    } else {
        return Err(BootstrapError::Other("docker save gave no output".into()));
    };
    let counted = Counting {
        inner: stream,
        count: count.clone(),
    };
    // Bytes and rate while it travels (the first leg takes minutes on a slow link).
    let receive = master_receive_command(file);
    let sending = master.ssh.pipe_into(&receive, counted);
    let shown = async {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let sent = count.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6;
            let secs = started.elapsed().as_secs_f64();
            bar.set_message(format!(
                "image to the master: {sent:.0} MB in {secs:.0}s, {:.1} MB/s",
                sent / secs.max(1e-3)
            ));
        }
    };
    tokio::select! {
        sent = sending => { sent?; }
        () = shown => {}
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let status = save
        .wait()
        .await
        .map_err(|e| fail(&format!("docker save {image}"), &e))?;
    if !status.success() {
        return Err(BootstrapError::Other(format!("docker save {image} failed")));
    }
    let mut dropped = None;
    if let Some(task) = filter {
        let f = task
            .await
            .map_err(|e| fail("the layer filter", &e))?
            .map_err(|e| BootstrapError::Other(e.to_string()))?;
        dropped = Some(f.dropped_bytes);
    }
    if let Some(task) = feeder {
        task.await
            .map_err(|e| fail("the layer filter", &e))?
            .map_err(|e| fail("zstd's input", &e))?;
    }
    if let Some(mut z) = compressor {
        let ok = z.wait().await.map(|s| s.success()).unwrap_or(false);
        if !ok {
            return Err(BootstrapError::Other(
                "zstd failed on the image stream".into(),
            ));
        }
    }
    let how = if file.zstd {
        "to the master over SSH (zstd -1)"
    } else {
        "to the master over SSH (uncompressed: zstd missing here or on a node)"
    };
    Ok(Transfer {
        what: match dropped {
            Some(d) => format!(
                "{how}, {:.1} MB of layers the nodes hold left out",
                d as f64 / 1e6
            ),
            None => how.into(),
        },
        bytes: count.load(std::sync::atomic::Ordering::Relaxed),
        secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_master_keeps_the_stream_as_it_came() {
        let zstd = ImageFile { zstd: true };
        let plain = ImageFile { zstd: false };
        assert_eq!(
            master_receive_command(zstd),
            "sudo -n bash -c 'set -e -o pipefail; rm -f /var/tmp/hvd-cluster-image.tar.zst.id; cat > /var/tmp/hvd-cluster-image.tar.zst'"
        );
        assert_eq!(
            master_receive_command(plain),
            "sudo -n bash -c 'set -e -o pipefail; rm -f /var/tmp/hvd-cluster-image.tar.id; cat > /var/tmp/hvd-cluster-image.tar'"
        );
        assert_eq!(zstd.decompress(), "zstd -d -q -c");
    }
}
