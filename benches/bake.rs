//! A cluster from a bake against a cluster from the stock node image (issue 51), in one run on
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

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn hvd(state: &Path, args: &[&str]) -> (f64, String) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(args)
        .env("HVD_CLUSTER_STATE_DIR", state)
        .output()
        .expect("run hvd-cluster");
    let took = started.elapsed().as_secs_f64();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        panic!("hvd-cluster {} failed:\n{said}", args.join(" "));
    }
    (took, said)
}

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
    let profile = dir.path().join("profile.toml");
    let p = profile.to_str().expect("a UTF-8 path");
    let state = dir.path().join("state");
    let more = (workers + 1).to_string();

    let result = std::panic::catch_unwind(|| {
        std::fs::write(&profile, &stock).expect("write the profile");
        let (up, _) = hvd(&state, &["up", p]);
        let (scale, _) = hvd(&state, &["scale", p, "--workers", &more]);
        let (bake, _) = hvd(&state, &["bake", p]);
        hvd(&state, &["down", "--yes", p]);
        // `scale` wrote its count into the profile: the same profile as the first `up`'s again
        std::fs::write(&profile, &baked).expect("write the profile");
        let (up_baked, said) = hvd(&state, &["up", p]);
        assert!(said.contains("booted from the bake"), "{said}");
        let (scale_baked, said) = hvd(&state, &["scale", p, "--workers", &more]);
        assert!(said.contains("booted from the bake"), "{said}");
        println!(
            "bake provider=local nodes={} up={up:.1} scale={scale:.1} bake={bake:.1} \
             up_baked={up_baked:.1} scale_baked={scale_baked:.1} up_baked/up={:.2} \
             scale_baked/scale={:.2}",
            workers + 1,
            up_baked / up,
            scale_baked / scale
        );
    });
    let _ = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(["down", "--yes", p])
        .env("HVD_CLUSTER_STATE_DIR", &state)
        .output();
    let _ = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(["bake", p, "--delete", &bake_name, "--yes"])
        .env("HVD_CLUSTER_STATE_DIR", &state)
        .output();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
