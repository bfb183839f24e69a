//! What the cloud benchmarks share: the local cloud's clouds.yaml and a profile of fake
//! servers (`profiles/local-cloud.toml` renamed, with `workers` small workers).
#![allow(dead_code)] // each benchmark uses its part

use std::path::Path;

/// The local cloud's clouds.yaml (`OS_CLIENT_CONFIG_FILE`, else tests/cloud/state's), which
/// must exist: the cloud runs (`tests/cloud/start`).
pub fn local_clouds_yaml() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let clouds = std::env::var("OS_CLIENT_CONFIG_FILE").unwrap_or_else(|_| {
        root.join("tests/cloud/state/clouds.yaml")
            .display()
            .to_string()
    });
    assert!(
        Path::new(&clouds).exists(),
        "start the local cloud first: tests/cloud/start"
    );
    clouds
}

/// profiles/local-cloud.toml as cluster `name` with `workers` workers of flavor m1.small
/// (fake servers: nothing boots).
pub fn fake_servers_profile(name: &str, workers: u32) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join("profiles/local-cloud.toml"))
        .expect("profiles/local-cloud.toml")
        .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
        .replace("count = 3", &format!("count = {workers}"))
        .replace("flavor = \"g1.a100\"", "flavor = \"m1.small\"")
}
