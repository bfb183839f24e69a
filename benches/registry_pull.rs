//! A private registry's image onto every node (local provider, images built, the registry of
//! `tests/registry/start` with the images pushed into it): every node pulling at once from
//! the master's mirror, which takes each blob from the registry once (`container.pull =
//! "master"`, the default), against every node pulling from the registry for itself
//! (`"every-node"`), in one run, for two images: our Horovod image (~1.1 GB unpacked) and a
//! big one (~3.1 GB unpacked: ours plus two layers of a copy of its Python tree, which
//! compress as a framework's libraries do), built here from ours when Docker lacks it.
//! Prints, per run,
//!
//!   registry-pull image=I nodes=N pull=MODE seconds=S registry_bytes=B
//!
//! (S: the image step, from `up`'s "image on the N node(s) that lacked it after S" line;
//! B: the bytes of image layers the registry sent, from its own log), then per image and size
//!
//!   registry-pull image=I nodes=N master/every-node seconds=RS bytes=RB
//!
//! Asserts nothing about time. On this machine the "network" between the registry and the
//! nodes is a Docker bridge: the registry's bytes cost little here, and what `every-node`
//! costs on a cloud (N copies over the site's uplink, or the registry's egress) shows in B.
//!
//!   cargo bench --bench registry_pull                      # ours and big, 4 nodes
//!   HVD_BENCH_NODES=4,8 HVD_BENCH_IMAGES=big cargo bench --bench registry_pull

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// The tests' registry, shared with the bench.
#[path = "../tests/common/registry.rs"]
#[allow(dead_code)]
mod registry;
use registry::Registry;

const IMAGE: &str = "hvd-cluster/horovod:tf2.12.1-hvd0.28.1";
/// Ours plus two layers, each a copy of its Python tree (~1 GB each).
const BIG: &str = "hvd-cluster/bench-big:1";

/// Builds [`BIG`] from our image when Docker lacks it.
fn build_big() {
    let have = Command::new("docker")
        .args(["image", "inspect", BIG])
        .output()
        .expect("docker image inspect");
    if have.status.success() {
        return;
    }
    let recipe =
        format!("FROM {IMAGE}\nRUN cp -a /opt/hvd /opt/bulk-1\nRUN cp -a /opt/hvd /opt/bulk-2\n");
    let mut build = Command::new("docker")
        .args(["build", "-q", "-t", BIG, "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("docker build");
    use std::io::Write as _;
    build
        .stdin
        .take()
        .expect("docker build's stdin")
        .write_all(recipe.as_bytes())
        .expect("the recipe");
    assert!(
        build.wait().expect("docker build").success(),
        "docker build {BIG}"
    );
}

fn hvd(state: &Path, docker_config: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(args)
        .env("HVD_CLUSTER_STATE_DIR", state)
        .env("DOCKER_CONFIG", docker_config)
        .env_remove("HVD_CLUSTER_REGISTRY_USER")
        .env_remove("HVD_CLUSTER_REGISTRY_PASSWORD")
        .output()
        .expect("run hvd-cluster");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "hvd-cluster {} failed:\n{}{stderr}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// `image on the N node(s) that lacked it after 12.3s` -> 12.3
fn image_secs(log: &str) -> f64 {
    log.lines()
        .find_map(|l| {
            l.split("that lacked it after ")
                .nth(1)
                .and_then(|s| s.trim().trim_end_matches('s').parse().ok())
        })
        .unwrap_or_else(|| panic!("no `image on the ... after` line in:\n{log}"))
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let images: Vec<(&str, &str)> = std::env::var("HVD_BENCH_IMAGES")
        .unwrap_or_else(|_| "ours,big".into())
        .split(',')
        .filter_map(|i| match i.trim() {
            "ours" => Some(("ours", IMAGE)),
            "big" => Some(("big", BIG)),
            _ => None,
        })
        .collect();
    if images.iter().any(|(_, i)| *i == BIG) {
        build_big();
    }
    let local: Vec<&str> = images.iter().map(|(_, i)| *i).collect();
    let registry = Registry::start_pushing(&local);
    let docker_config = registry.state.join("docker");
    let nodes: Vec<usize> = std::env::var("HVD_BENCH_NODES")
        .unwrap_or_else(|_| "4".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let base =
        std::fs::read_to_string(root.join("profiles/local.toml")).expect("profiles/local.toml");
    let dir = tempfile::tempdir().expect("temp dir");
    for (label, local_image) in &images {
        let pushed = format!("hvd-test/{}", &local_image["hvd-cluster/".len()..]);
        let image = registry.image(&pushed);
        for &n in &nodes {
            let mut measured = HashMap::new();
            for mode in ["master", "every-node"] {
                let name = format!("bench-pull-{n}");
                let text = base
                    .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
                    .replace("count = 2", &format!("count = {}", n - 1))
                    .replace(
                        &format!("image = \"{IMAGE}\""),
                        &format!(
                            "image = \"{image}\"\nregistry_ca = \"{}\"\npull = \"{mode}\"",
                            registry.state.join("ca.crt").display()
                        ),
                    )
                    .replace("source = \"build\"", "source = \"pull\"");
                let profile = dir.path().join(format!("{name}.toml"));
                std::fs::write(&profile, text).expect("write profile");
                let p = profile.to_str().expect("utf-8 path");
                let before = registry.blob_bytes_sent(&pushed);
                let log = hvd(dir.path(), &docker_config, &["up", p]);
                let bytes = registry.blob_bytes_sent(&pushed) - before;
                let secs = image_secs(&log);
                hvd(dir.path(), &docker_config, &["down", "--yes", p]);
                println!(
                    "registry-pull image={label} nodes={n} pull={mode} seconds={secs:.1} registry_bytes={bytes}"
                );
                measured.insert(mode, (secs, bytes));
            }
            let (ms, mb) = measured["master"];
            let (es, eb) = measured["every-node"];
            println!(
                "registry-pull image={label} nodes={n} master/every-node seconds={:.2} bytes={:.2}",
                ms / es.max(0.001),
                mb as f64 / eb.max(1) as f64,
            );
        }
    }
}
