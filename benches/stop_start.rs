//! `start` against `up`: how long a stopped cluster takes to come back to a passing check,
//! against the fresh `up` that made it, in the same run, and how long `status` of the
//! stopped cluster takes (the lifecycle bar: under 1 s). Local provider (images built),
//! profiles/local.toml with `HVD_BENCH_WORKERS` workers (default 2). Prints
//!
//!   stop_start provider=local nodes=N up=S stop=S status=S start=S start/up=R
//!
//! and asserts nothing about time. The same figure for the stock-Debian VMs on the local
//! OpenStack cloud (shelve and unshelve under emulation) is the `bench:` line
//! tests/cloud_vms.rs prints.
//!
//!   cargo bench --bench stop_start

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn hvd(state: &Path, args: &[&str]) -> f64 {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(args)
        .env("HVD_CLUSTER_STATE_DIR", state)
        .output()
        .expect("run hvd-cluster");
    let took = started.elapsed().as_secs_f64();
    if !out.status.success() {
        panic!(
            "hvd-cluster {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    took
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workers: u32 = std::env::var("HVD_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2);
    let name = format!("bench-stop-{}", std::process::id() % 10000);
    let text = std::fs::read_to_string(root.join("profiles/local.toml"))
        .expect("profiles/local.toml")
        .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
        .replace("count = 2", &format!("count = {workers}"));
    let dir = tempfile::tempdir().expect("a temporary folder");
    let profile = dir.path().join("profile.toml");
    std::fs::write(&profile, text).expect("write the profile");
    let p = profile.to_str().expect("a UTF-8 path");
    let state = dir.path().join("state");

    let result = std::panic::catch_unwind(|| {
        let up = hvd(&state, &["up", p]);
        let stop = hvd(&state, &["stop", p]);
        let status = hvd(&state, &["status", p]);
        let start = hvd(&state, &["start", p]);
        println!(
            "stop_start provider=local nodes={} up={up:.1} stop={stop:.1} status={status:.2} start={start:.1} start/up={:.2}",
            workers + 1,
            start / up
        );
    });
    hvd(&state, &["down", "--yes", p]);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
