//! A pull's one copy at every-node speed (`container.pull = "master"`, the default): the master
//! runs a registry mirror of the one image (`templates/node/image_mirror.py`) and every node
//! that lacks the image, the master too, pulls it from there at once. Each blob crosses from
//! the user's registry once, the first node to ask starting its fetch; every node receives it
//! as it arrives, from a file on the master, while the master is still receiving it: no
//! `docker save` or `docker load`, and each node's Docker unpacks layers as they come, as when
//! it pulls from the registry itself. The mirror holds the credentials in memory only, for the
//! pull, and serves the cluster's own nodes only; every node reaches it through its own
//! 127.0.0.1 (a relay on each worker), where Docker pulls without TLS and without a daemon
//! setting. An image named by digest keeps the master's pull and the fan-out tree
//! ([`super::delivery`]): Docker records a digest under the name it was pulled by.

use futures::future::{join_all, try_join_all};

use super::image::Background;
use super::{bar_of, BootstrapError, NodeSession, NODE_DIR};
use crate::progress::Progress;
use crate::registry::{self, PullAccess};
use crate::ssh::{self, shell_quote};
use crate::templates;

/// The mirror's port: on the master's private address for the workers' relays, and on every
/// node's 127.0.0.1 for its Docker.
pub const MIRROR_PORT: u16 = 12347;
/// The blobs as they arrive, on the master, until the delivery ends (in /var/tmp, where the
/// room check counts them).
const CACHE: &str = "/var/tmp/hvd-cluster-mirror";
/// The mirror on the master, and the relay on each worker.
const MIRROR: Background = Background {
    pidfile: "/run/hvd-cluster-image-mirror.pid",
    log: "/var/tmp/hvd-cluster-image-mirror.log",
};
const RELAY: Background = Background {
    pidfile: "/run/hvd-cluster-image-relay.pid",
    log: "/var/tmp/hvd-cluster-image-relay.log",
};
/// A mirror or relay left by an interrupted `up` ends after this many idle seconds.
const IDLE_SECS: u32 = 300;

/// Where the image is on its registry, as the mirror asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `host[:port]` the mirror connects to (Docker Hub's API host for Docker Hub's images).
    pub host: String,
    /// The repository's path there (`library/NAME` for Docker Hub's official images).
    pub repo: String,
    pub tag: String,
}

/// The image's registry, repository and tag; `None` for a reference with a digest (which
/// the mirror does not serve). The reference passed `input::check_image_reference`. Pure.
pub fn upstream_of(image: &str) -> Option<Upstream> {
    if image.contains('@') {
        return None;
    }
    let registry = registry::registry_of(image);
    let rest = image
        .strip_prefix(registry)
        .and_then(|r| r.strip_prefix('/'))
        .unwrap_or(image);
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], &rest[last_slash + i + 1..]),
        None => (rest, "latest"),
    };
    let docker_hub = registry == registry::DOCKER_HUB || registry == "index.docker.io";
    Some(Upstream {
        host: if docker_hub {
            "registry-1.docker.io".into()
        } else {
            registry.into()
        },
        repo: if docker_hub && !repo.contains('/') {
            format!("library/{repo}")
        } else {
            repo.into()
        },
        tag: tag.into(),
    })
}

impl Upstream {
    /// The name every node pulls: the mirror, on its own 127.0.0.1.
    pub fn local_name(&self) -> String {
        format!("127.0.0.1:{MIRROR_PORT}/{}:{}", self.repo, self.tag)
    }
}

/// The master's command (under sudo, the access JSON on its standard input): the mirror
/// started in the background on `bind` (the master's private address) for `peers`, waiting
/// until it listens. A mirror of an interrupted run is stopped and its blobs dropped first. Pure.
pub fn serve_command(upstream: &Upstream, bind: &str, peers: &[String]) -> String {
    let peers: String = peers
        .iter()
        .map(|p| format!(" {}", shell_quote(p)))
        .collect();
    MIRROR.start(
        &format!(
            "rm -rf {CACHE} /run/hvd-cluster-mirror-access.*\ninstall -d -m 700 {CACHE}\numask 077\n\
             a=$(mktemp /run/hvd-cluster-mirror-access.XXXXXX)\ncat > \"$a\"\n"
        ),
        &format!(
            "python3 {NODE_DIR}/image_mirror.py serve {bind} {MIRROR_PORT} {CACHE} {host} {repo} \"$a\" {IDLE_SECS}{peers}",
            bind = shell_quote(bind),
            host = shell_quote(&upstream.host),
            repo = shell_quote(&upstream.repo),
        ),
        "rm -f \"$a\"; ",
    )
}

/// A worker's command (under sudo): the relay from its 127.0.0.1 to the master's mirror. Pure.
pub fn relay_command(master: &str) -> String {
    RELAY.start(
        "",
        &format!(
            "python3 {NODE_DIR}/image_mirror.py relay {MIRROR_PORT} {master} {MIRROR_PORT} {IDLE_SECS}",
            master = shell_quote(master),
        ),
        "",
    )
}

/// A node's pull (under sudo): from the mirror, then under the image's own name, the mirror's
/// name dropped (the image stays). Pure.
pub fn pull_command(upstream: &Upstream, image: &str) -> String {
    let local = shell_quote(&upstream.local_name());
    format!(
        "set -e\ndocker pull -q {local} >/dev/null\ndocker tag {local} {image}\ndocker rmi {local} >/dev/null\n",
        image = shell_quote(image),
    )
}

/// What the mirror did, from its log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MirrorReport {
    /// Each blob fetched from the registry, with its bytes, in order.
    pub fetched: Vec<(String, u64)>,
    /// Blob requests served whole to a node.
    pub served: usize,
    /// Why fetches failed (`fetch-failed` lines), as the mirror said.
    pub failed: Vec<String>,
    /// Peers refused (not a node of this cluster).
    pub refused: Vec<String>,
}

/// Reads the mirror's log lines (see image_mirror.py). Pure.
pub fn read_log(log: &str) -> MirrorReport {
    let mut report = MirrorReport::default();
    for line in log.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let value = |key: &str| {
            words
                .iter()
                .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        };
        match words.as_slice() {
            ["fetched", "blob", digest, ..] => report.fetched.push((
                digest.to_string(),
                value("bytes").and_then(|b| b.parse().ok()).unwrap_or(0),
            )),
            ["served", "blob", ..] => report.served += 1,
            ["fetch-failed", "blob" | "manifest", digest, ..] => report.failed.push(format!(
                "{}: {}",
                short_digest(digest),
                value("why").unwrap_or("?").replace('_', " ")
            )),
            ["refused", ..] => report.refused.extend(value("peer").map(str::to_string)),
            _ => {}
        }
    }
    report
}

fn short_digest(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

impl MirrorReport {
    /// Blobs fetched from the registry more than once (a second fetch after a failed one).
    pub fn fetched_again(&self) -> Vec<&str> {
        let mut seen = std::collections::HashSet::new();
        self.fetched
            .iter()
            .filter(|(d, _)| !seen.insert(d.as_str()))
            .map(|(d, _)| d.as_str())
            .collect()
    }

    pub fn registry_bytes(&self) -> u64 {
        self.fetched.iter().map(|(_, b)| b).sum()
    }

    /// One line: what crossed from the registry, and what the nodes took from the master.
    pub fn describe(&self, nodes: usize) -> String {
        let again = match self.fetched_again().len() {
            0 => "each once".to_string(),
            n => format!("{n} again after a failed fetch"),
        };
        format!(
            "the master's mirror served {} blob request(s) to {nodes} node(s) and took {} blob(s), {:.1} MB, from the registry ({again})",
            self.served,
            self.fetched.len(),
            self.registry_bytes() as f64 / 1e6,
        )
    }
}

/// One line for a node whose pull from the mirror failed: the mirror's reason when a fetch
/// from the registry failed, else what Docker said. Pure.
pub fn explain_failure(
    image: &str,
    with_credentials: bool,
    report: &MirrorReport,
    docker_said: &str,
) -> String {
    if let Some(why) = report.failed.last() {
        // not trusted: the line that names `registry_ca`
        if why.to_lowercase().contains("certificate verify failed") {
            return registry::explain_pull_failure(image, with_credentials, why);
        }
        return format!(
            "the master's mirror could not fetch {} from the registry {}: {}",
            crate::input::shown(image),
            crate::input::shown(registry::registry_of(image)),
            crate::input::shown_message(why, 160)
        );
    }
    format!(
        "docker pull of {} through the master's mirror failed: {}",
        crate::input::shown(image),
        crate::input::shown_message(registry::last_line(docker_said), 200)
    )
}

/// Gets the image onto every node in `missing` (the master among them or not) through the
/// master's mirror, then stops the mirror and its relays and drops its blobs, whatever the
/// outcome.
pub async fn deliver(
    sessions: &[NodeSession],
    missing: &[&NodeSession],
    bars: &[indicatif::ProgressBar],
    image: &str,
    upstream: &Upstream,
    access: Option<&PullAccess>,
    progress: &Progress,
) -> Result<(), BootstrapError> {
    let master = &sessions[0];
    let workers: Vec<&NodeSession> = missing
        .iter()
        .copied()
        .filter(|s| s.node.name != master.node.name)
        .collect();
    let bars: Vec<&indicatif::ProgressBar> =
        missing.iter().map(|m| bar_of(sessions, bars, m)).collect();
    let script = format!("{NODE_DIR}/image_mirror.py");
    let bytes = templates::IMAGE_MIRROR.as_bytes();
    try_join_all(
        std::iter::once(master)
            .chain(workers.iter().copied())
            .map(|s| s.ssh.write_file(&script, bytes, 0o755)),
    )
    .await?;
    let started = std::time::Instant::now();
    let delivered = start_and_pull(master, missing, &workers, &bars, image, upstream, access).await;
    // Whatever happened: the mirror's log read, then the mirror, the relays and the blobs gone.
    let log = master
        .ssh
        .sudo(&format!("cat {} 2>/dev/null || true", MIRROR.log))
        .await
        .unwrap_or_default();
    let stop_relay = format!("{}; rm -f {}", RELAY.end(), RELAY.log);
    let _ = join_all(workers.iter().map(|w| w.ssh.sudo(&stop_relay))).await;
    let _ = master
        .ssh
        .sudo(&format!(
            "{}; rm -rf {CACHE} {} /run/hvd-cluster-mirror-access.*",
            MIRROR.end(),
            MIRROR.log
        ))
        .await;
    let report = read_log(&log);
    match delivered {
        Ok(lines) => {
            for line in lines {
                progress.line(line);
            }
            progress.line(format!(
                "{} ({:.1}s)",
                report.describe(missing.len()),
                started.elapsed().as_secs_f64()
            ));
            Ok(())
        }
        Err(Failed::Ssh(e)) => Err(e.into()),
        Err(Failed::Pull { node, docker_said }) => Err(BootstrapError::Other(format!(
            "{node}: {}",
            explain_failure(
                image,
                access.and_then(|a| a.credentials.as_ref()).is_some(),
                &report,
                &docker_said
            )
        ))),
    }
}

enum Failed {
    Ssh(ssh::SshError),
    Pull { node: String, docker_said: String },
}

impl From<ssh::SshError> for Failed {
    fn from(e: ssh::SshError) -> Self {
        Failed::Ssh(e)
    }
}

/// The mirror, the relays, then every node's pull at once; a line per node.
async fn start_and_pull(
    master: &NodeSession,
    missing: &[&NodeSession],
    workers: &[&NodeSession],
    bars: &[&indicatif::ProgressBar],
    image: &str,
    upstream: &Upstream,
    access: Option<&PullAccess>,
) -> Result<Vec<String>, Failed> {
    let master_ip = master.host.address().to_string();
    let peers: Vec<String> = workers
        .iter()
        .map(|w| w.host.address().to_string())
        .collect();
    let access_json = access.cloned().unwrap_or_default().mirror_access_json();
    let serve = serve_command(upstream, &master_ip, &peers);
    master
        .ssh
        .pipe_into(
            &format!("sudo -n bash -c {}", shell_quote(&serve)),
            access_json.as_bytes(),
        )
        .await?;
    let relay = relay_command(&master_ip);
    try_join_all(workers.iter().map(|w| w.ssh.sudo(&relay))).await?;
    let pull = pull_command(upstream, image);
    let pulled = try_join_all(missing.iter().zip(bars).map(|(s, bar)| {
        let pull = &pull;
        async move {
            bar.set_message(format!("docker pull {image} through the master's mirror"));
            let started = std::time::Instant::now();
            s.ssh.sudo(pull).await.map_err(|e| match e {
                ssh::SshError::Command { stderr, .. } => Failed::Pull {
                    node: s.node.name.clone(),
                    docker_said: stderr,
                },
                other => Failed::Ssh(other),
            })?;
            Ok::<String, Failed>(format!(
                "{}: pulled {image} through the master's mirror in {:.1}s",
                s.node.name,
                started.elapsed().as_secs_f64()
            ))
        }
    }))
    .await?;
    Ok(pulled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_asks_the_images_registry_for_its_repository_and_tag() {
        let u = upstream_of("198.18.0.1:5443/hvd-test/like-horovod:1").expect("a tag");
        assert_eq!(
            u,
            Upstream {
                host: "198.18.0.1:5443".into(),
                repo: "hvd-test/like-horovod".into(),
                tag: "1".into()
            }
        );
        assert_eq!(u.local_name(), "127.0.0.1:12347/hvd-test/like-horovod:1");
        // no tag: latest; a port is not a tag
        let u = upstream_of("registry.example:5000/team/img").expect("no digest");
        assert_eq!((u.repo.as_str(), u.tag.as_str()), ("team/img", "latest"));
        // Docker Hub: its API host, official images under library/
        let hub = upstream_of("horovod/horovod:0.28.1").expect("a tag");
        assert_eq!(hub.host, "registry-1.docker.io");
        assert_eq!(hub.repo, "horovod/horovod");
        assert_eq!(upstream_of("ubuntu").expect("hub").repo, "library/ubuntu");
        assert_eq!(
            upstream_of("docker.io/library/debian:12")
                .expect("hub")
                .repo,
            "library/debian"
        );
        // a digest keeps the master's pull and the fan-out tree
        assert_eq!(
            upstream_of(&format!("reg.example/x@sha256:{}", "a".repeat(64))),
            None
        );
    }

    #[test]
    fn commands_quote_every_value_and_clean_up_after_an_interrupted_run() {
        let u = Upstream {
            host: "reg.example:5000".into(),
            repo: "team/img".into(),
            tag: "1".into(),
        };
        let s = serve_command(&u, "10.0.0.5", &["10.0.0.6".into(), "10.0.0.7".into()]);
        assert!(s.contains(
            "image_mirror.py serve '10.0.0.5' 12347 /var/tmp/hvd-cluster-mirror 'reg.example:5000' 'team/img' \"$a\" 300 '10.0.0.6' '10.0.0.7' >"
        ), "{s}");
        // the access file: private, read from stdin, never an argument
        assert!(
            s.contains("umask 077\n") && s.contains("cat > \"$a\"\n"),
            "{s}"
        );
        assert!(
            s.contains("rm -rf /var/tmp/hvd-cluster-mirror /run/hvd-cluster-mirror-access.*"),
            "{s}"
        );
        let r = relay_command("10.0.0.5");
        assert!(
            r.contains("image_mirror.py relay 12347 '10.0.0.5' 12347 300"),
            "{r}"
        );
        let p = pull_command(&u, "reg.example:5000/team/img:1");
        assert_eq!(
            p,
            "set -e\ndocker pull -q '127.0.0.1:12347/team/img:1' >/dev/null\n\
             docker tag '127.0.0.1:12347/team/img:1' 'reg.example:5000/team/img:1'\n\
             docker rmi '127.0.0.1:12347/team/img:1' >/dev/null\n"
        );
    }

    #[test]
    fn the_log_says_what_crossed_from_the_registry_and_what_was_served() {
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        let log = format!(
            "listening\nfetched manifest 1 bytes=742\nfetched blob {a} bytes=1000 secs=0.1\n\
             served blob {a} peer=127.0.0.1 bytes=1000\nserved blob {a} peer=10.0.0.6 bytes=1000\n\
             fetch-failed blob {b} why=the_registry_answered_500\nfetched blob {b} bytes=500 secs=1\n\
             refused peer=10.9.9.9\n"
        );
        let r = read_log(&log);
        assert_eq!(r.fetched, vec![(a.clone(), 1000), (b.clone(), 500)]);
        assert_eq!((r.served, r.registry_bytes()), (2, 1500));
        assert!(r.fetched_again().is_empty());
        assert_eq!(
            r.failed,
            vec!["sha256:bbbbbbbbbbbb: the registry answered 500"]
        );
        assert_eq!(r.refused, vec!["10.9.9.9"]);
        assert_eq!(
            r.describe(2),
            "the master's mirror served 2 blob request(s) to 2 node(s) and took 2 blob(s), 0.0 MB, from the registry (each once)"
        );
        let twice = read_log(&format!(
            "fetched blob {a} bytes=1 secs=0\nfetched blob {a} bytes=1 secs=0\n"
        ));
        assert_eq!(twice.fetched_again(), vec![a.as_str()]);
        // a failure names the mirror's reason, else Docker's last line, escaped
        assert!(explain_failure("reg.example/x:1", true, &r, "")
            .contains("the master's mirror could not fetch reg.example/x:1 from the registry reg.example: sha256:bbbbbbbbbbbb: the registry answered 500"));
        let plain = explain_failure(
            "reg.example/x:1",
            false,
            &MirrorReport::default(),
            "pulling\nerror: connection reset\x1b[31m\n",
        );
        assert!(plain.starts_with("docker pull of reg.example/x:1 through the master's mirror failed: error: connection reset"), "{plain}");
        assert!(!plain.contains('\x1b'), "{plain}");
        // a registry the mirror does not trust: the line that names registry_ca
        let untrusted = read_log("fetch-failed manifest 1 why=[SSL:_CERTIFICATE_VERIFY_FAILED]_certificate_verify_failed\n");
        assert_eq!(untrusted.failed.len(), 1);
        let line = explain_failure("reg.example/x:1", false, &untrusted, "");
        assert!(line.contains("set container.registry_ca"), "{line}");
    }
}
