//! The image's parts that every way of delivering it shares ([`super::delivery`] chooses the
//! way): which nodes lack it (by id), and the fan-out of the master's file ([`super::archive`])
//! down a tree of nodes over plain TCP on the private network
//! ([`super::fanout`]: every receiving worker relays to its children as the bytes arrive),
//! streamed into `docker load` (checked by its size, zstd's frame checksum and docker's
//! layer digests).

use std::process::Stdio;

use futures::future::try_join_all;

use super::archive::{prepare_command, ImageFile};
use super::{fanout, BootstrapError, NodeSession, NODE_DIR};
use crate::ssh;
use crate::templates;

pub use crate::images::local_image_id;

/// The nodes that lack the image (compared by id with this machine's when it has it).
pub async fn lacking<'a>(
    image: &str,
    want: Option<&str>,
    sessions: &'a [NodeSession],
) -> Result<Vec<&'a NodeSession>, BootstrapError> {
    // The image reference passed the reference grammar; it is still quoted wherever a shell sees it.
    let script = format!("printf '%s\\n' \"{}\"", crate::images::node_image_id(image));
    let ids = try_join_all(sessions.iter().map(|s| s.ssh.sudo(&script))).await?;
    Ok(sessions
        .iter()
        .zip(ids)
        .filter(|(_, id)| match want {
            Some(w) => id.trim() != w,
            None => id.trim().is_empty(),
        })
        .map(|(s, _)| s)
        .collect())
}

/// One line for each node booted from a bake (it carries [`crate::bake::MARKER`]): the
/// bake's image found there, or not the profile's (then it is delivered as to any node).
pub async fn say_baked(
    image: &str,
    sessions: &[NodeSession],
    progress: &crate::progress::Progress,
) -> Result<(), BootstrapError> {
    let script = format!(
        "cat {} 2>/dev/null || true; printf 'now=%s\\n' \"{}\"",
        crate::bake::MARKER,
        crate::images::node_image_id(image)
    );
    let outs = try_join_all(sessions.iter().map(|s| s.ssh.sudo(&script))).await?;
    for (s, out) in sessions.iter().zip(outs) {
        if let Some(line) = baked_line(&s.node.name, &out) {
            progress.line(line);
        }
    }
    Ok(())
}

/// What [`say_baked`] says of one node, from its marker's lines and the image's id there now.
pub fn baked_line(node: &str, out: &str) -> Option<String> {
    let get = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let bake = crate::input::shown(get("bake")?);
    Some(match (get("image"), get("now")) {
        (Some(baked), Some(now)) if baked == now => format!(
            "{node}: booted from the bake {bake}: Docker and the image already here (nothing \
             installed or sent)"
        ),
        (Some(_), None) => format!(
            "{node}: booted from the bake {bake}, but its Docker lacks the bake's image: the \
             image is sent as to any node"
        ),
        _ => format!(
            "{node}: booted from the bake {bake}, which holds another image than the profile's: \
             the image is sent as to any node"
        ),
    })
}

/// The port of the master's one-shot image server (TCP, private address only; the nodes'
/// security group admits every port from its own members).
pub const IMAGE_PORT: u16 = 12346;

pub async fn local_has_zstd() -> bool {
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
        // kB below a megabyte: a transfer of only the missing layers may be that small
        let size = if self.bytes < 1_000_000 {
            format!("{:.1} kB", self.bytes as f64 / 1e3)
        } else {
            format!("{:.1} MB", self.bytes as f64 / 1e6)
        };
        format!(
            "image {}: {size} in {:.1}s, {:.1} MB/s",
            self.what,
            self.secs,
            self.mb_per_s()
        )
    }
}

/// Parses `key=value` words of a line (the node scripts' reports).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// A node script that runs in the background, found again by its pidfile: the image's
/// server on the master, the mirror and its relays. One at a time: starting stops one an
/// interrupted run left.
#[derive(Debug, Clone, Copy)]
pub struct Background {
    pub pidfile: &'static str,
    pub log: &'static str,
}

impl Background {
    /// Stops the one running, if any (a shell line; the caller's cleanup may follow).
    pub fn stop(self) -> String {
        format!(
            "[ ! -s {p} ] || kill \"$(cat {p})\" 2>/dev/null || true",
            p = self.pidfile
        )
    }

    /// Stops it and removes its pidfile: the end of a delivery, whatever its outcome.
    pub fn end(self) -> String {
        format!("{}; rm -f {}", self.stop(), self.pidfile)
    }

    /// The script (under sudo) that stops a previous one, runs `prelude`, starts `command`
    /// (quoted by the caller) and waits up to 10 s until its log says `listening`; else runs
    /// `on_failure` and fails with the log.
    pub fn start(self, prelude: &str, command: &str, on_failure: &str) -> String {
        let Background { pidfile, log } = self;
        format!(
            "set -e\n{stop}\n{prelude}setsid nohup {command} > {log} 2>&1 < /dev/null &\n\
             echo $! > {pidfile}\n\
             for _ in $(seq 1 100); do grep -q '^listening' {log} && exit 0; kill -0 \"$(cat {pidfile})\" 2>/dev/null || break; sleep 0.1; done\n\
             {on_failure}cat {log} >&2; exit 1\n",
            stop = self.stop(),
        )
    }
}

/// The master's one-shot image server.
const IMAGE_SERVER: Background = Background {
    pidfile: "/run/hvd-cluster-image-serve.pid",
    log: "/var/tmp/hvd-cluster-image-serve.log",
};

/// The master → workers leg over plain TCP inside the cluster: the master serves `file` when
/// `ready` (what it received, or the archive it kept whole from an earlier delivery), or saves
/// the image there first (compressed when `file.zstd`, its id beside it), and serves it once to each of
/// its children in the tree on its private address, port [`IMAGE_PORT`]; each worker passes
/// the bytes on to its own children and streams them through zstd straight into
/// `docker load`, with no copy on its disk. The byte count is checked
/// on arrival, the content by zstd's frame checksum and docker's layer digests (a damaged layer
/// fails `docker load` with "invalid diffID"), so no separate sha256 pass, which costs minutes
/// in an emulated guest. Returns a line per transfer.
pub async fn fan_out_image(
    master: &NodeSession,
    workers: &[&NodeSession],
    image: &str,
    file: ImageFile,
    ready: bool,
    degree: usize,
) -> Result<Vec<String>, BootstrapError> {
    let quoted_image = ssh::shell_quote(image);
    let master_ip = master.host.address().to_string();
    let path = file.path();
    master
        .ssh
        .write_file(
            &format!("{NODE_DIR}/image_serve.py"),
            templates::IMAGE_SERVE.as_bytes(),
            0o755,
        )
        .await?;
    let started = std::time::Instant::now();
    let prepared = master
        .ssh
        .sudo(&prepare_command(&quoted_image, file, ready))
        .await?;
    let Some(bytes) = field(&prepared, "bytes").and_then(|b| b.parse::<u64>().ok()) else {
        return Err(BootstrapError::Other(format!(
            "{}: could not read the image file's size: {}",
            master.node.name,
            prepared.trim()
        )));
    };
    let saved = (!ready).then(|| {
        format!(
            "{}: saved {image} for the workers in {:.1}s (kept until `stop` for `scale` and `heal`)",
            master.node.name,
            started.elapsed().as_secs_f64()
        )
    });
    // The fan-out tree: the master serves its children, every worker relays to its own.
    let places = fanout::tree(workers.len(), degree);
    let address = |i: usize| workers[i].host.address().to_string();
    let addresses: Vec<String> = fanout::master_children(workers.len(), degree)
        .into_iter()
        .map(|i| ssh::shell_quote(&address(i)))
        .collect();
    master
        .ssh
        .sudo(&IMAGE_SERVER.start(
            "",
            &format!(
                "python3 {NODE_DIR}/image_serve.py {ip} {IMAGE_PORT} {path} 900 {addrs}",
                ip = ssh::shell_quote(&master_ip),
                addrs = addresses.join(" "),
            ),
            "",
        ))
        .await?;
    let fetched = try_join_all(workers.iter().zip(&places).map(|(w, place)| {
        let quoted_image = &quoted_image;
        let parent = place.parent.map_or_else(|| master_ip.clone(), address);
        let relay = Relay {
            bind: w.host.address().to_string(),
            children: place.children.iter().map(|&c| address(c)).collect(),
        };
        async move {
            w.ssh
                .write_file(
                    &format!("{NODE_DIR}/image_fetch.py"),
                    templates::IMAGE_FETCH.as_bytes(),
                    0o755,
                )
                .await?;
            let started = std::time::Instant::now();
            let out = w
                .ssh
                .sudo(&worker_fetch_command(&parent, &relay, bytes, file, quoted_image))
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
            let from = place
                .parent
                .map_or("master", |p| workers[p].node.name.as_str());
            let relayed = if relay.children.is_empty() {
                String::new()
            } else {
                format!(", relayed to {} more", relay.children.len())
            };
            let t = Transfer {
                what: format!(
                    "{from} -> {} over plain TCP :{IMAGE_PORT}{}, streamed into docker load{relayed}",
                    w.node.name,
                    if file.zstd { " (zstd)" } else { "" }
                ),
                bytes: got,
                secs,
            };
            // The transfer's figure ends with the stream; `docker load` goes on applying the
            // layers after it (under emulation for minutes): say when the image was there.
            Ok::<String, BootstrapError>(format!(
                "{}: {}; loaded after {:.1}s",
                w.node.name,
                t.describe(),
                started.elapsed().as_secs_f64()
            ))
        }
    }))
    .await;
    // The server exits once every worker was served; stop it anyway (the caller settles the
    // file: [`super::archive::settle_archive`]).
    let _ = master.ssh.sudo(&IMAGE_SERVER.end()).await;
    Ok(saved.into_iter().chain(fetched?).collect())
}

/// A worker's part in the fan-out tree: the address it listens on for its children, and theirs.
#[derive(Debug, Clone, PartialEq)]
pub struct Relay {
    pub bind: String,
    pub children: Vec<String>,
}

/// What a worker runs (under sudo) to take the image from its parent (the master or another
/// worker), passing it on to its children as it arrives: fetch | decompress | docker load,
/// every stage's failure failing the whole (pipefail); prints `bytes= secs= children=`.
pub fn worker_fetch_command(
    parent: &str,
    relay: &Relay,
    bytes: u64,
    file: ImageFile,
    quoted_image: &str,
) -> String {
    let report = "/run/hvd-cluster-image-fetch.report";
    let relay_args = if relay.children.is_empty() {
        String::new()
    } else {
        std::iter::once(&relay.bind)
            .chain(&relay.children)
            .map(|a| format!(" {}", ssh::shell_quote(a)))
            .collect()
    };
    format!(
        "set -e -o pipefail\nrm -f {report}\n\
         python3 {NODE_DIR}/image_fetch.py {ip} {IMAGE_PORT} {bytes} {report}{relay_args} | {decompress} | docker load -q >/dev/null\n\
         docker image inspect {quoted_image} >/dev/null\ncat {report}\n",
        ip = ssh::shell_quote(parent),
        decompress = file.decompress(),
    )
}

#[cfg(test)]
mod image_tests {
    use super::*;

    #[test]
    fn transfers_say_what_went_where() {
        let t = Transfer {
            what: "x".into(),
            bytes: 160_000_000,
            secs: 1.0,
        };
        assert_eq!(t.describe(), "image x: 160.0 MB in 1.0s, 160.0 MB/s");
        let small = Transfer {
            what: "x".into(),
            bytes: 20_480,
            secs: 0.5,
        };
        assert_eq!(small.describe(), "image x: 20.5 kB in 0.5s, 0.0 MB/s");
        assert_eq!(field("report bytes=12 secs=0.5", "bytes"), Some("12"));
        assert_eq!(field("sha256=abc bytes=1", "sha"), None);
    }

    #[test]
    fn a_worker_streams_the_image_into_docker_load_and_fails_with_any_stage() {
        let leaf = Relay {
            bind: "10.0.0.7".into(),
            children: vec![],
        };
        let c = worker_fetch_command("10.0.0.5", &leaf, 42, ImageFile { zstd: true }, "'img:1'");
        assert!(c.starts_with("set -e -o pipefail\n"), "{c}");
        assert!(
            c.contains("image_fetch.py '10.0.0.5' 12346 42 /run/hvd-cluster-image-fetch.report | zstd -d -q -c | docker load -q"),
            "{c}"
        );
        assert!(c.contains("docker image inspect 'img:1'"), "{c}");
        let plain =
            worker_fetch_command("10.0.0.5", &leaf, 42, ImageFile { zstd: false }, "'img:1'");
        assert!(plain.contains("| cat | docker load"), "{plain}");
        // a relay listens on its own address and names its children, each quoted
        let relay = Relay {
            bind: "10.0.0.7".into(),
            children: vec!["10.0.0.8".into(), "10.0.0.9".into()],
        };
        let r = worker_fetch_command("10.0.0.6", &relay, 42, ImageFile { zstd: true }, "'img:1'");
        assert!(
            r.contains("image_fetch.py '10.0.0.6' 12346 42 /run/hvd-cluster-image-fetch.report '10.0.0.7' '10.0.0.8' '10.0.0.9' | zstd -d"),
            "{r}"
        );
    }
}

#[cfg(test)]
mod bake_line_tests {
    use super::baked_line;

    #[test]
    fn a_baked_node_is_named_once_and_a_stale_bake_is_not_trusted() {
        assert_eq!(
            baked_line("w-1", "now=sha256:1\n"),
            None,
            "no marker: no line"
        );
        let found = baked_line("w-1", "bake=hvd-bake\nimage=sha256:1\nnow=sha256:1\n").unwrap();
        assert!(
            found.contains("w-1: booted from the bake hvd-bake: Docker and the image already here"),
            "{found}"
        );
        for other in [
            "bake=hvd-bake\nimage=sha256:1\nnow=sha256:2\n",
            "bake=hvd-bake\nimage=sha256:1\nnow=\n",
        ] {
            let line = baked_line("w-1", other).unwrap();
            assert!(line.contains("the image is sent as to any node"), "{line}");
        }
        let lacking = baked_line("w-1", "bake=b\nimage=sha256:1\nnow=\n").unwrap();
        assert!(
            lacking.contains("its Docker lacks the bake's image"),
            "{lacking}"
        );
        let hostile = baked_line("w-1", "bake=\u{1b}[2Jx\nimage=a\nnow=a\n").unwrap();
        assert!(!hostile.contains('\u{1b}'), "{hostile}");
    }
}
