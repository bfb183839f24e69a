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
            state,
            password,
        }
    }

    /// `name` (one of the consts here) as pulled from this registry.
    pub fn image(&self, name: &str) -> String {
        format!("{}/{name}", self.address)
    }

    /// Bytes of `name`'s image layers (blob GETs of its repository, e.g. `hvd-test/x` of
    /// `hvd-test/x:1`) the registry has sent so far. Per repository: tests that share the
    /// registry at the same time (the VM test pulls a repository of its own) count apart.
    pub fn blob_bytes_sent(&self, name: &str) -> u64 {
        let repo = name.rsplit_once(':').map_or(name, |(repo, _)| repo);
        let blobs = format!("/v2/{repo}/blobs/sha256:");
        let log = std::fs::read_to_string(self.state.join("registry.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("response completed"))
            .filter(|l| l.contains("http.request.method=GET") && l.contains(&blobs))
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("http.response.written="))
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .sum()
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
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(blob(&digest)).expect("the manifest"))
                .expect("a JSON manifest");
        let size = |v: &serde_json::Value| v["size"].as_u64().expect("a size");
        size(&manifest["config"])
            + manifest["layers"]
                .as_array()
                .expect("layers")
                .iter()
                .map(size)
                .sum::<u64>()
    }
}
