//! The private registry of tests/registry/start (Debian's docker-registry over TLS with basic
//! auth), with the stand-ins for users' own images pushed into it (tests/registry/standins/).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The image the shipped profile names, replaced by the pulled one.
pub const OUR_IMAGE: &str = "hvd-cluster/horovod:tf2.12.1-hvd0.28.1";
/// Built and pushed by tests/registry/start.
pub const STAND_IN: &str = "hvd-test/like-horovod-horovod:1";
/// Like a vendor's framework container: no OpenSSH, no Jupyter, a banner entrypoint, a
/// non-root user.
pub const VENDOR_STAND_IN: &str = "hvd-test/like-vendor:1";
/// Python without Horovod: an image that cannot serve.
pub const NO_HOROVOD: &str = "hvd-test/no-horovod:1";

pub struct Registry {
    pub address: String,
    /// The same images behind token auth (Bearer, a token service beside it), as Docker Hub,
    /// GHCR, GitLab and Harbor answer.
    pub token_address: String,
    pub state: PathBuf,
    pub password: String,
}

impl Registry {
    pub fn start() -> Registry {
        Registry::start_pushing(&[])
    }

    /// The registry with the stand-ins and `images` (of this machine's Docker) pushed too.
    pub fn start_pushing(images: &[&str]) -> Registry {
        Registry::start_with(images, false)
    }

    /// The registry with only `images` pushed: no stand-in is built (a test early in the
    /// suite, before they are).
    pub fn start_with_only(images: &[&str]) -> Registry {
        Registry::start_with(images, true)
    }

    fn start_with(images: &[&str], only: bool) -> Registry {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(root.join("tests/registry/start"))
            .args(images)
            .env("HVD_REGISTRY_IMAGES_ONLY", if only { "1" } else { "0" })
            .output()
            .expect("run tests/registry/start");
        assert!(
            out.status.success(),
            "tests/registry/start failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let state = root.join("tests/registry/state");
        let env: HashMap<String, String> = std::fs::read_to_string(state.join("env"))
            .expect("the registry's env file")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let password = std::fs::read_to_string(state.join("password"))
            .expect("the registry's password")
            .trim()
            .to_string();
        assert!(password.len() >= 16);
        Registry {
            address: env["HVD_REGISTRY"].clone(),
            token_address: env["HVD_REGISTRY_TOKEN"].clone(),
            state,
            password,
        }
    }

    /// `name` (one of the consts here) as pulled from this registry.
    pub fn image(&self, name: &str) -> String {
        format!("{}/{name}", self.address)
    }

    /// `name` as pulled through the token door.
    pub fn token_image(&self, name: &str) -> String {
        format!("{}/{name}", self.token_address)
    }

    /// Bytes of `name`'s image layers (blob GETs of its repository, e.g. `hvd-test/x` of
    /// `hvd-test/x:1`) the registry has sent so far. Per repository: tests that share the
    /// registry at the same time (the VM test pulls a repository of its own) count apart.
    pub fn blob_bytes_sent(&self, name: &str) -> u64 {
        let log = std::fs::read_to_string(self.state.join("registry.log")).unwrap_or_default();
        blob_gets(log.lines(), name).map(|g| g.written).sum()
    }

    /// Lines in the registry's log (`token-registry.log`: the token door's) so far: a mark
    /// for [`Registry::blob_gets_since`].
    pub fn log_mark(&self, log: &str) -> usize {
        std::fs::read_to_string(self.state.join(log))
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// Each blob of `name`'s repository sent (a GET answered 200) since `mark` in `log`
    /// (`registry.log`, or `token-registry.log`): its digest and the address that asked for
    /// it, in the log's order.
    pub fn blob_gets_since(&self, log: &str, name: &str, mark: usize) -> Vec<(String, String)> {
        let log = std::fs::read_to_string(self.state.join(log)).unwrap_or_default();
        blob_gets(log.lines().skip(mark), name)
            .filter(|g| g.status == 200)
            .map(|g| (g.digest, g.from))
            .collect()
    }

    /// Asserts no layer of `name` in `gets` crossed twice (a layer the nodes held already,
    /// from an image that shares it, crossed not at all), some did, and every blob went to
    /// `master` only. (The image's small config blob crosses twice: the room check's `docker
    /// manifest inspect` on the master reads it too.)
    pub fn assert_each_layer_once_to(&self, name: &str, gets: &[(String, String)], master: &str) {
        let (_, layers) = self.manifest_blobs(name);
        let mut crossed = 0;
        for layer in &layers {
            let times = gets.iter().filter(|(d, _)| d == layer).count();
            assert!(times <= 1, "layer {layer} crossed {times} times: {gets:?}");
            crossed += times;
        }
        assert!(crossed > 0, "no layer of {name} crossed: {gets:?}");
        assert!(
            gets.iter().all(|(_, from)| from == master),
            "every blob to the master ({master}) only: {gets:?}"
        );
    }

    /// Asserts the registry sent about one copy of `name` (its compressed layers and config)
    /// since it had sent `before` bytes of it: one pull for a whole cluster.
    pub fn assert_sent_one_copy(&self, name: &str, before: u64) {
        let sent = self.blob_bytes_sent(name) - before;
        let copy = self.one_copy_bytes(name);
        eprintln!("the registry sent {sent} bytes of {name}; one copy is {copy} bytes");
        assert!(
            sent > copy / 2 && sent < copy + copy / 2,
            "one copy of {name} ({copy} bytes) from the registry, not {sent}"
        );
    }

    /// The compressed size of `name` as pushed: what one pull takes from the registry
    /// (its manifest's layers and config, read from the registry's own storage).
    pub fn one_copy_bytes(&self, name: &str) -> u64 {
        let manifest = self.manifest(name);
        let size = |v: &serde_json::Value| v["size"].as_u64().expect("a size");
        size(&manifest["config"])
            + manifest["layers"]
                .as_array()
                .expect("layers")
                .iter()
                .map(size)
                .sum::<u64>()
    }

    /// `name`'s config digest and its layers' digests, as pushed.
    pub fn manifest_blobs(&self, name: &str) -> (String, Vec<String>) {
        let manifest = self.manifest(name);
        let digest = |v: &serde_json::Value| v["digest"].as_str().expect("a digest").to_string();
        (
            digest(&manifest["config"]),
            manifest["layers"]
                .as_array()
                .expect("layers")
                .iter()
                .map(digest)
                .collect(),
        )
    }

    /// `name`'s manifest, read from the registry's own storage.
    fn manifest(&self, name: &str) -> serde_json::Value {
        let v2 = self.state.join("data/docker/registry/v2");
        let blob = |digest: &str| {
            let hex = digest.trim().trim_start_matches("sha256:");
            v2.join("blobs/sha256")
                .join(&hex[..2])
                .join(hex)
                .join("data")
        };
        let (repo, tag) = name.rsplit_once(':').expect("a tag");
        let link = v2
            .join("repositories")
            .join(repo)
            .join("_manifests/tags")
            .join(tag)
            .join("current/link");
        let digest = std::fs::read_to_string(&link).expect("the tag's manifest link");
        serde_json::from_slice(&std::fs::read(blob(&digest)).expect("the manifest"))
            .expect("a JSON manifest")
    }
}

/// A GET of a blob as the registry's log line of its response says.
struct BlobGet {
    digest: String,
    /// The address that asked (without its port).
    from: String,
    status: u16,
    written: u64,
}

/// The GETs of `name`'s repository's blobs among the registry's log `lines`.
fn blob_gets<'a>(
    lines: impl Iterator<Item = &'a str> + 'a,
    name: &str,
) -> impl Iterator<Item = BlobGet> + 'a {
    let repo = name.rsplit_once(':').map_or(name, |(repo, _)| repo);
    let blobs = format!("/v2/{repo}/blobs/");
    let value = |line: &str, key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(|v| v.trim_matches('"').to_string())
    };
    lines
        .filter(|l| l.contains("response completed") && l.contains("http.request.method=GET"))
        .filter_map(move |l| {
            let digest = value(l, "http.request.uri=")?
                .strip_prefix(&blobs)?
                .to_string();
            let from = value(l, "http.request.remoteaddr=")?;
            Some(BlobGet {
                digest,
                from: from
                    .rsplit_once(':')
                    .map_or(from.clone(), |(ip, _)| ip.to_string()),
                status: value(l, "http.response.status=")?.parse().ok()?,
                written: value(l, "http.response.written=")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0),
            })
        })
}
