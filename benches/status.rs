//! `status` of a large cluster on the project's local OpenStack cloud: a master and 64
//! workers (fake servers, `up --infra-only`), then a plain `status` and `status --json`, five
//! times each, against a baseline in the same run: the OpenStack CLI listing the same
//! servers by the cluster's tag (`openstack server list --tags ...`), which is what a user
//! without the tool would run and shows less (no network pieces, no addresses checked, no
//! autostop word). Prints medians and ratios; asserts nothing about time.
//!
//!   tests/cloud/start && cargo bench --bench status
//!   HVD_BENCH_WORKERS=16 cargo bench --bench status     # another size

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Seconds `cmd` took; panics with its stderr when it fails.
fn timed(mut cmd: Command, what: &str) -> f64 {
    let started = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let secs = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    secs
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn main() {
    let clouds = common::local_clouds_yaml();
    let workers: u32 = std::env::var("HVD_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.trim().parse().ok())
        .unwrap_or(64);
    let dir = tempfile::tempdir().expect("temp dir");
    let hvd = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"));
        cmd.args(args)
            .env("OS_CLIENT_CONFIG_FILE", &clouds)
            .env("HVD_CLUSTER_STATE_DIR", dir.path());
        cmd
    };
    let name = format!("bench-status-{workers}");
    let text = common::fake_servers_profile(&name, workers);
    let profile = dir.path().join(format!("{name}.toml"));
    std::fs::write(&profile, text).expect("write profile");
    let p = profile.to_str().expect("utf-8 path");

    let up = timed(hvd(&["up", p, "--infra-only"]), "up --infra-only");
    println!("{name}: up --infra-only of 1 + {workers} servers in {up:.1}s");
    let runs = 5;
    let plain = median(
        (0..runs)
            .map(|_| timed(hvd(&["status", p]), "status"))
            .collect(),
    );
    let json = median(
        (0..runs)
            .map(|_| timed(hvd(&["status", p, "--json"]), "status --json"))
            .collect(),
    );
    // The baseline: the OpenStack CLI of the cloud's venv, if the cloud has one.
    let cli = Path::new("/opt/hvd-cluster-cloud/venv/bin/openstack");
    let baseline = cli.exists().then(|| {
        median(
            (0..runs)
                .map(|_| {
                    let mut cmd = Command::new(cli);
                    cmd.args(["server", "list", "--tags"])
                        .arg(hvd_cluster::provider::openstack::tag(&name))
                        .args(["-f", "value", "-c", "ID"])
                        .env("OS_CLIENT_CONFIG_FILE", &clouds)
                        .env("OS_CLOUD", "local-user");
                    timed(cmd, "openstack server list")
                })
                .collect(),
        )
    });
    let down = timed(hvd(&["down", "--yes", p]), "down");

    println!("{:>28} {:>9} {:>9}", "", "median s", "ratio");
    let base = baseline.unwrap_or(f64::NAN);
    for (what, secs) in [("status", plain), ("status --json", json)] {
        println!("{what:>28} {secs:>9.2} {:>9.2}", secs / base);
    }
    match baseline {
        Some(b) => println!("{:>28} {b:>9.2} {:>9.2}", "openstack server list", 1.0),
        None => println!("(no OpenStack CLI at {}: no baseline)", cli.display()),
    }
    println!("down of 1 + {workers} servers in {down:.1}s");
}
