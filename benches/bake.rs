//! A cluster from a bake against a cluster from the stock node image, in one run on
//! the local provider (images built), profiles/local.toml with `HVD_BENCH_WORKERS` workers
//! (default 1):
//!
//! 1. `up` of the profile from the node image, then `scale` by one worker;
//! 2. `bake` of worker-1 (the node container committed, its Docker data copied), `down`;
//! 3. `up` of the same profile with `image` naming the bake, then `scale` by one worker;
//! 4. `down`, `bake --delete`.
//!
//! Prints
//!
//!   bake provider=local nodes=N up=S scale=S bake=S up_baked=S scale_baked=S
//!        up_baked/up=R scale_baked/scale=R
//!
//! and asserts nothing about time (the target, 0.2x, is for the stock-Debian VMs, where the
//! bake spares Docker's install and the image's load; on the local provider Docker is in the
//! node image and the bake spares the image's delivery alone). The real-host servers' figure
//! is the `bench:` line of tests/cloud_hosts.rs.
//!
//!   cargo bench --bench bake

#[path = "common/local.rs"]
mod local;

use std::path::Path;

use local::{timed, Cluster};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workers: u32 = std::env::var("HVD_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(1);
    let name = format!("bench-bake-{}", std::process::id() % 10000);
    let bake_name = format!("{name}-bake");
    let stock = std::fs::read_to_string(root.join("profiles/local.toml"))
        .expect("profiles/local.toml")
        .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
        .replace("count = 2", &format!("count = {workers}"));
    let baked = stock.replace(
        "[master]\n",
        &format!("[master]\nimage = \"{bake_name}\"\n"),
    );
    assert_ne!(stock, baked, "profiles/local.toml has a [master] table");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let c = Cluster {
        name: name.clone(),
        profile: dir.path().join("profile.toml"),
        state: dir.path().join("state"),
    };
    let p = c.profile.to_str().expect("a UTF-8 path").to_string();
    let more = (workers + 1).to_string();
    let result = std::panic::catch_unwind(|| {
        std::fs::write(&c.profile, &stock).expect("write the profile");
        let up = timed(|| drop(c.run(&["up", &p])));
        let scale = timed(|| drop(c.run(&["scale", &p, "--workers", &more])));
        let bake = timed(|| drop(c.run(&["bake", &p])));
        c.run(&["down", "--yes", &p]);
        // `scale` wrote its count into the profile: the first `up`'s profile again, its nodes
        // from the bake
        std::fs::write(&c.profile, &baked).expect("write the profile");
        let mut said = Vec::new();
        let up_baked = timed(|| said.push(c.run(&["up", &p]).1));
        let scale_baked = timed(|| said.push(c.run(&["scale", &p, "--workers", &more]).1));
        for s in &said {
            assert!(s.contains("booted from the bake"), "{s}");
        }
        println!(
            "bake provider=local nodes={} up={up:.1} scale={scale:.1} bake={bake:.1} \
             up_baked={up_baked:.1} scale_baked={scale_baked:.1} up_baked/up={:.2} \
             scale_baked/scale={:.2}",
            workers + 1,
            up_baked / up,
            scale_baked / scale
        );
    });
    // `down` (the Cluster's drop), then the bake
    let delete = ["bake", &p, "--delete", &bake_name, "--yes"];
    drop(c);
    let _ = std::process::Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(delete)
        .env("HVD_CLUSTER_STATE_DIR", dir.path().join("state"))
        .output();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
