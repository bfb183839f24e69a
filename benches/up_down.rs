//! `up --infra-only` and `down` wall time and API calls for 1, 4 and 16 workers on the
//! project's local OpenStack cloud, against a baseline in the same run: the same tool making
//! one cloud call at a time (`--parallel 1`), as a sequential script or Terraform with
//! `-parallelism=1` would. Reports ratios, asserts nothing about time.
//!
//!   tests/cloud/start && cargo bench --bench up_down
//!   HVD_BENCH_WORKERS=1,4 cargo bench --bench up_down     # a subset

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

struct Run {
    secs: f64,
    calls: u64,
}

fn hvd(state: &Path, parallel: usize, args: &[&str]) -> Run {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(args)
        .env("HVD_CLUSTER_STATE_DIR", state)
        .env("HVD_CLUSTER_PARALLEL", parallel.to_string())
        .output()
        .expect("run hvd-cluster");
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        panic!("hvd-cluster {} failed:\n{stderr}", args.join(" "));
    }
    // The last progress line reads "... after 12.3s, 87 API calls".
    let calls = stderr
        .lines()
        .rev()
        .find_map(|l| {
            l.split(", ")
                .nth(1)?
                .strip_suffix(" API calls")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0);
    Run { secs, calls }
}

fn main() {
    let clouds = common::local_clouds_yaml();
    std::env::set_var("OS_CLIENT_CONFIG_FILE", &clouds);
    let workers: Vec<u32> = std::env::var("HVD_BENCH_WORKERS")
        .unwrap_or_else(|_| "1,4,16".into())
        .split(',')
        .filter_map(|w| w.trim().parse().ok())
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");

    println!(
        "{:>7} {:>9} {:>8} {:>6} {:>8} {:>6} {:>11} {:>11}",
        "workers", "mode", "up s", "calls", "down s", "calls", "up ratio", "down ratio"
    );
    for n in workers {
        let mut results = Vec::new();
        for parallel in [1usize, 8] {
            let name = format!("bench-{n}-p{parallel}");
            let text = common::fake_servers_profile(&name, n);
            let profile = dir.path().join(format!("{name}.toml"));
            std::fs::write(&profile, text).expect("write profile");
            let p = profile.to_str().expect("utf-8 path");
            let up = hvd(dir.path(), parallel, &["up", p, "--infra-only"]);
            let down = hvd(dir.path(), parallel, &["down", "--yes", p]);
            results.push((parallel, up, down));
        }
        let (base_up, base_down) = (results[0].1.secs, results[0].2.secs);
        for (parallel, up, down) in &results {
            let mode = if *parallel == 1 { "serial" } else { "parallel" };
            println!(
                "{n:>7} {mode:>9} {:>8.1} {:>6} {:>8.1} {:>6} {:>11.2} {:>11.2}",
                up.secs,
                up.calls,
                down.secs,
                down.calls,
                up.secs / base_up,
                down.secs / base_down
            );
        }
    }
}
