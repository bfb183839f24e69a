//! The Horovod image on every node: `pull` on each node, or (`transfer`, `build`) sent once
//! from this machine to the master over SSH (zstd when both ends have it), then from the
//! master to the workers over plain TCP on the private network, sha256 checked.

use std::process::Stdio;

use futures::future::try_join_all;

use super::{BootstrapError, Inputs, NodeSession, NODE_DIR};
use crate::profile::ImageSource;
use crate::progress::Progress;
use crate::render;
use crate::ssh;

/// The id of an image on this machine's Docker engine, if it is there.
pub async fn local_image_id(image: &str) -> Option<String> {
    let out = tokio::process::Command::new("docker")
        .args(["image", "inspect", "-f", "{{.Id}}", image])
        .output()
        .await
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Gets the Horovod image onto every node: `pull` on each node, or `transfer`: sent once from
/// this machine to the master, then fanned out from the master to the workers over the
/// private network (one copy over the user's link, not N).
pub(super) async fn ensure_image(
    inputs: &Inputs<'_>,
    sessions: &[NodeSession],
    bars: &[indicatif::ProgressBar],
    progress: &Progress,
) -> Result<usize, BootstrapError> {
    let p = inputs.profile;
    let image = &p.container.image;
    // The image reference passed the reference grammar; it is still quoted wherever a shell sees it.
    let quoted_image = ssh::shell_quote(image);
    let want = local_image_id(image).await;
    let mut missing = Vec::new();
    for s in sessions {
        let id = s
            .ssh
            .sudo(&format!(
                "docker image inspect -f '{{{{.Id}}}}' {quoted_image} 2>/dev/null || true"
            ))
            .await?;
        let present = match &want {
            Some(w) => id.trim() == w,
            None => !id.trim().is_empty(),
        };
        if !present {
            missing.push(s);
        }
    }
    if missing.is_empty() {
        return Ok(0);
    }
    match p.container.source {
        ImageSource::Pull => {
            let quoted_image = &quoted_image;
            try_join_all(missing.iter().zip(bars).map(|(s, bar)| async move {
                bar.set_message(format!("docker pull {image}"));
                s.ssh.sudo(&format!("docker pull {quoted_image}")).await
            }))
            .await?;
        }
        ImageSource::Transfer | ImageSource::Build => {
            if want.is_none() {
                return Err(BootstrapError::Other(format!(
                    "the image {image} is not on this machine; build it first (the local provider does so on `up`), or set container.source = \"pull\""
                )));
            }
            let master = &sessions[0];
            let workers: Vec<&NodeSession> = missing
                .iter()
                .copied()
                .filter(|s| s.node.name != master.node.name)
                .collect();
            // zstd on this machine and on every node that gets the image: the image then crosses
            // every link compressed and the master keeps it compressed for the workers.
            let zstd = local_has_zstd().await
                && try_join_all(missing.iter().map(|s| async move {
                    Ok::<bool, BootstrapError>(s.ssh.run("command -v zstd").await.is_ok())
                }))
                .await?
                .into_iter()
                .all(|has| has);
            let file = ImageFile { zstd };
            let mut received = false;
            if missing.iter().any(|s| s.node.name == master.node.name) {
                bars[0].set_message(format!("sending {image} to the master"));
                // Keep the bytes the master received for the workers (no second `docker save`).
                let keep = !workers.is_empty();
                let sent = send_image_to_master(master, image, file, keep).await?;
                progress.line(format!("{}: {}", master.node.name, sent.describe()));
                received = keep;
            }
            if !workers.is_empty() {
                bars[0].set_message(format!(
                    "serving {image} to {} worker(s) on port {IMAGE_PORT}",
                    workers.len()
                ));
                // The master loads the file it received while the workers fetch it: under
                // emulation `docker load` is the slow part, so the two overlap.
                let master_load = async {
                    if !received {
                        return Ok(None);
                    }
                    let started = std::time::Instant::now();
                    master
                        .ssh
                        .sudo(&format!(
                            "set -e -o pipefail\n{} {} | docker load -q >/dev/null",
                            file.decompress(),
                            file.path()
                        ))
                        .await
                        .map(|_| Some(started.elapsed().as_secs_f64()))
                };
                let (loaded, fanned) = tokio::join!(
                    master_load,
                    fan_out_image(master, &workers, image, file, received)
                );
                let _ = master.ssh.sudo(&format!("rm -f {}", file.path())).await;
                if let Some(secs) = loaded? {
                    progress.line(format!("{}: docker load {secs:.1}s", master.node.name));
                }
                for line in fanned? {
                    progress.line(&line);
                }
            }
        }
    }
    Ok(1)
}

/// The port of the master's one-shot image server (TCP, private address only; the nodes'
/// security group admits every port from its own members).
pub const IMAGE_PORT: u16 = 12346;

/// The image as a file on the master, waiting for the workers: zstd-compressed when every end
/// has zstd (a third of the bytes on every link and on the master's disk), else the plain tar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageFile {
    pub zstd: bool,
}

impl ImageFile {
    pub fn path(self) -> &'static str {
        if self.zstd {
            "/var/tmp/hvd-cluster-image.tar.zst"
        } else {
            "/var/tmp/hvd-cluster-image.tar"
        }
    }
    /// The command that turns the file's bytes (a path argument or stdin) back into the tar.
    pub fn decompress(self) -> &'static str {
        if self.zstd {
            "zstd -d -q -c"
        } else {
            "cat"
        }
    }
}

async fn local_has_zstd() -> bool {
    tokio::process::Command::new("zstd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .map(|s| s.success())
        .unwrap_or(false)
}

/// One image transfer: what went over the wire, how long it took, how.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    pub what: String,
    pub bytes: u64,
    pub secs: f64,
}

impl Transfer {
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs.max(1e-6)
    }
    pub fn describe(&self) -> String {
        format!(
            "image {}: {:.1} MB in {:.1}s, {:.1} MB/s",
            self.what,
            self.bytes as f64 / 1e6,
            self.secs,
            self.mb_per_s()
        )
    }
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

/// The command the master runs on the image stream from this machine: kept as it came (the
/// file the workers fetch; the master loads it while it serves them), or decompressed straight
/// into `docker load` when no worker needs it.
pub fn master_load_command(file: ImageFile, keep: bool) -> String {
    let script = if keep {
        format!("set -e -o pipefail; cat > {}", file.path())
    } else {
        format!(
            "set -e -o pipefail; {} | docker load -q >/dev/null",
            file.decompress()
        )
    };
    format!("sudo -n bash -c {}", ssh::shell_quote(&script))
}

/// `docker save` here, over SSH to the master's `docker load`: zstd at a fast level when
/// both ends have it (SSH is the slow part under emulation), else as it is.
async fn send_image_to_master(
    master: &NodeSession,
    image: &str,
    file: ImageFile,
    keep: bool,
) -> Result<Transfer, BootstrapError> {
    let remote_zstd = file.zstd;
    let mut save = tokio::process::Command::new("docker")
        .args(["save", image])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BootstrapError::Other(format!("docker save {image}: {e}")))?;
    let saved = save
        .stdout
        .take()
        .ok_or_else(|| BootstrapError::Other("docker save gave no output".into()))?;
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = std::time::Instant::now();
    let mut compressor = None;
    let stream: Box<dyn tokio::io::AsyncRead + Unpin + Send> = if remote_zstd {
        let into: Stdio = saved
            .try_into()
            .map_err(|e| BootstrapError::Other(format!("docker save {image}: {e}")))?;
        let mut z = tokio::process::Command::new("zstd")
            .args(["-1", "-T0", "-q", "-c"])
            .stdin(into)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BootstrapError::Other(format!("zstd: {e}")))?;
        let out = z
            .stdout
            .take()
            .ok_or_else(|| BootstrapError::Other("zstd gave no output".into()))?;
        compressor = Some(z);
        Box::new(out)
    } else {
        Box::new(saved)
    };
    let counted = Counting {
        inner: stream,
        count: count.clone(),
    };
    master
        .ssh
        .pipe_into(&master_load_command(file, keep), counted)
        .await?;
    let secs = started.elapsed().as_secs_f64();
    let status = save
        .wait()
        .await
        .map_err(|e| BootstrapError::Other(format!("docker save {image}: {e}")))?;
    if !status.success() {
        return Err(BootstrapError::Other(format!("docker save {image} failed")));
    }
    if let Some(mut z) = compressor {
        let ok = z.wait().await.map(|s| s.success()).unwrap_or(false);
        if !ok {
            return Err(BootstrapError::Other(
                "zstd failed on the image stream".into(),
            ));
        }
    }
    Ok(Transfer {
        what: if remote_zstd {
            "to the master over SSH (zstd -1)".into()
        } else {
            "to the master over SSH (uncompressed: zstd missing here or on a node)".into()
        },
        bytes: count.load(std::sync::atomic::Ordering::Relaxed),
        secs,
    })
}

/// Parses `key=value` words of a line (the node scripts' reports).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// The master → workers leg over plain TCP inside the cluster: the master keeps what it
/// received (or saves the image, compressed when `file.zstd`) and serves it once to each
/// worker's address on its private address, port [`IMAGE_PORT`]; each worker streams it
/// through zstd straight into `docker load`, with no copy on its disk. The byte count is checked
/// on arrival, the content by zstd's frame checksum and docker's layer digests (a damaged layer
/// fails `docker load` with "invalid diffID"), so no separate sha256 pass, which costs minutes
/// in an emulated guest. Returns a line per transfer.
async fn fan_out_image(
    master: &NodeSession,
    workers: &[&NodeSession],
    image: &str,
    file: ImageFile,
    received: bool,
) -> Result<Vec<String>, BootstrapError> {
    let quoted_image = ssh::shell_quote(image);
    let master_ip = master.host.address().to_string();
    let path = file.path();
    master
        .ssh
        .write_file(
            &format!("{NODE_DIR}/image_serve.py"),
            render::IMAGE_SERVE.as_bytes(),
            0o755,
        )
        .await?;
    // What the master just received is the image; anything else there may be stale.
    let save = if received {
        format!("test -s {path}")
    } else if file.zstd {
        format!("rm -f {path}; docker save {quoted_image} | zstd -1 -T0 -q -c > {path}")
    } else {
        format!("rm -f {path}; docker save -o {path} {quoted_image}")
    };
    let prepared = master
        .ssh
        .sudo(&format!(
            "set -e -o pipefail\n{save}\necho \"bytes=$(stat -c %s {path})\"\n"
        ))
        .await?;
    let Some(bytes) = field(&prepared, "bytes").and_then(|b| b.parse::<u64>().ok()) else {
        return Err(BootstrapError::Other(format!(
            "{}: could not read the image file's size: {}",
            master.node.name,
            prepared.trim()
        )));
    };
    let addresses: Vec<String> = workers
        .iter()
        .map(|w| ssh::shell_quote(&w.host.address().to_string()))
        .collect();
    // One server at a time: a previous one (an interrupted `up`) is stopped first.
    let log = "/var/tmp/hvd-cluster-image-serve.log";
    let pidfile = "/run/hvd-cluster-image-serve.pid";
    master
        .ssh
        .sudo(&format!(
            "set -e\n[ ! -s {pidfile} ] || kill \"$(cat {pidfile})\" 2>/dev/null || true\n\
             setsid nohup python3 {NODE_DIR}/image_serve.py {ip} {IMAGE_PORT} {path} 900 {addrs} > {log} 2>&1 < /dev/null &\n\
             echo $! > {pidfile}\n\
             for _ in $(seq 1 100); do grep -q listening {log} && exit 0; kill -0 \"$(cat {pidfile})\" 2>/dev/null || break; sleep 0.1; done\n\
             cat {log} >&2; exit 1\n",
            ip = ssh::shell_quote(&master_ip),
            addrs = addresses.join(" "),
        ))
        .await?;
    let fetched = try_join_all(workers.iter().map(|w| {
        let master_ip = &master_ip;
        let quoted_image = &quoted_image;
        async move {
            w.ssh
                .write_file(
                    &format!("{NODE_DIR}/image_fetch.py"),
                    render::IMAGE_FETCH.as_bytes(),
                    0o755,
                )
                .await?;
            let out = w
                .ssh
                .sudo(&worker_fetch_command(master_ip, bytes, file, quoted_image))
                .await
                .map_err(|e| BootstrapError::Step {
                    node: w.node.name.clone(),
                    step: "image".into(),
                    detail: e.to_string(),
                })?;
            let got = field(&out, "bytes")
                .and_then(|b| b.parse::<u64>().ok())
                .unwrap_or(0);
            let secs = field(&out, "secs")
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(0.0);
            let t = Transfer {
                what: format!(
                    "master -> {} over plain TCP :{IMAGE_PORT}{}, streamed into docker load",
                    w.node.name,
                    if file.zstd { " (zstd)" } else { "" }
                ),
                bytes: got,
                secs,
            };
            Ok::<String, BootstrapError>(format!("{}: {}", w.node.name, t.describe()))
        }
    }))
    .await;
    // The server exits once every worker was served; stop it anyway (the caller drops the file).
    let _ = master
        .ssh
        .sudo(&format!(
            "[ ! -s {pidfile} ] || kill \"$(cat {pidfile})\" 2>/dev/null || true; rm -f {pidfile}"
        ))
        .await;
    fetched
}

/// What a worker runs (under sudo) to take the image from the master: fetch | decompress |
/// docker load, every stage's failure failing the whole (pipefail); prints `bytes= secs=`.
pub fn worker_fetch_command(
    master_ip: &str,
    bytes: u64,
    file: ImageFile,
    quoted_image: &str,
) -> String {
    let report = "/run/hvd-cluster-image-fetch.report";
    format!(
        "set -e -o pipefail\nrm -f {report}\n\
         python3 {NODE_DIR}/image_fetch.py {ip} {IMAGE_PORT} {bytes} {report} | {decompress} | docker load -q >/dev/null\n\
         docker image inspect {quoted_image} >/dev/null\ncat {report}\n",
        ip = ssh::shell_quote(master_ip),
        decompress = file.decompress(),
    )
}

#[cfg(test)]
mod image_tests {
    use super::*;

    #[test]
    fn the_master_keeps_the_stream_as_it_came_or_loads_it() {
        let zstd = ImageFile { zstd: true };
        let plain = ImageFile { zstd: false };
        assert_eq!(
            master_load_command(zstd, true),
            "sudo -n bash -c 'set -e -o pipefail; cat > /var/tmp/hvd-cluster-image.tar.zst'"
        );
        assert_eq!(
            master_load_command(zstd, false),
            "sudo -n bash -c 'set -e -o pipefail; zstd -d -q -c | docker load -q >/dev/null'"
        );
        assert_eq!(
            master_load_command(plain, false),
            "sudo -n bash -c 'set -e -o pipefail; cat | docker load -q >/dev/null'"
        );
        assert_eq!(plain.path(), "/var/tmp/hvd-cluster-image.tar");
        let t = Transfer {
            what: "x".into(),
            bytes: 160_000_000,
            secs: 1.0,
        };
        assert_eq!(t.describe(), "image x: 160.0 MB in 1.0s, 160.0 MB/s");
        assert_eq!(field("report bytes=12 secs=0.5", "bytes"), Some("12"));
        assert_eq!(field("sha256=abc bytes=1", "sha"), None);
    }

    #[test]
    fn a_worker_streams_the_image_into_docker_load_and_fails_with_any_stage() {
        let c = worker_fetch_command("10.0.0.5", 42, ImageFile { zstd: true }, "'img:1'");
        assert!(c.starts_with("set -e -o pipefail\n"), "{c}");
        assert!(
            c.contains("image_fetch.py '10.0.0.5' 12346 42 /run/hvd-cluster-image-fetch.report | zstd -d -q -c | docker load -q"),
            "{c}"
        );
        assert!(c.contains("docker image inspect 'img:1'"), "{c}");
        let plain = worker_fetch_command("10.0.0.5", 42, ImageFile { zstd: false }, "'img:1'");
        assert!(plain.contains("| cat | docker load"), "{plain}");
    }
}
