//! `stage` on the local provider (images already built): a dataset from /shared onto the own
//! disk of 1, 4 and 8 workers of one cluster, against the tutorials' way in the same run (one
//! `scp -r` from this machine to each worker, through the cluster's ssh_config). A dataset
//! shaped like ImageNet's JPEGs (`HVD_BENCH_FILES` files, 2,000 by default, of 20-200 KB of
//! random bytes: ~220 MB) is pushed to /shared once; for N receivers the copies of N workers
//! are removed and `stage` sends to those N alone (the master, which has its copy, only
//! streams). Prints
//!
//!   stage receivers=N secs=S            (each the median of three runs, after `sync`)
//!   stage way=scp-r workers=N secs=S    (one run: N scp -r one after the other)
//!   stage ratio 4/1=R 8/1=R scp8/stage8=R
//!
//! Asserts nothing about time. On 2 cores the nodes' own writes share the CPU: a tree of 8
//! costs more than one copy's time here, where a cloud's nodes each have their own.
//! `HVD_BENCH_CPUS=0.25` caps every node container at that share of a core (the local
//! provider's `HVD_CLUSTER_LOCAL_CPUS`, as benches/bootstrap.rs does), so that one node gets
//! no more CPU than each of eight, as on a cloud; the lines then say `cpus=0.25`.
//!
//!   cargo bench --bench stage
//!   HVD_BENCH_CPUS=0.25 cargo bench --bench stage
//!   HVD_BENCH_FILES=500 HVD_BENCH_WORKERS=4 cargo bench --bench stage

#[path = "common/local.rs"]
mod local;

use std::path::Path;

use local::{make_dataset, median, sh, timed, Cluster};

const ROUNDS: usize = 3;

fn main() {
    let files: usize = std::env::var("HVD_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let workers: usize = std::env::var("HVD_BENCH_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
        .max(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let cpus = std::env::var("HVD_BENCH_CPUS").ok();
    if let Some(cpus) = &cpus {
        // read by the local provider when it creates the node containers (`up` below)
        std::env::set_var("HVD_CLUSTER_LOCAL_CPUS", cpus);
    }
    let cpus = cpus.unwrap_or_else(|| "uncapped".into());
    let name = format!("bs-{}", std::process::id() % 10_000);
    let profile = dir.path().join("bench.toml");
    let text = std::fs::read_to_string(root.join("profiles/local.toml"))
        .unwrap()
        .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
        .replace("count = 2", &format!("count = {workers}"));
    std::fs::write(&profile, text).unwrap();
    let p = profile.to_str().unwrap();
    let c = Cluster {
        name: name.clone(),
        profile: profile.clone(),
        state: dir.path().join("state"),
    };
    c.hvd(&["up", p]);
    let cfg = dir.path().join("ssh_config");
    std::fs::write(&cfg, c.hvd(&["ssh-config", p])).unwrap();
    let data = dir.path().join("b-stage");
    let mb = make_dataset(&data, files) as f64 / 1e6;
    println!("stage dataset files={files} mb={mb:.0} workers={workers} cpus={cpus}");
    c.hvd(&["push", p, data.to_str().unwrap()]);
    // every node has its copy; then each round takes the copies of N workers away
    c.hvd(&["stage", p, "/shared/b-stage"]);
    let forget = |n: usize| {
        for i in 1..=n {
            sh(&format!(
                "docker exec {name}-worker-{i} rm -rf /var/lib/hvd-cluster/data/staged/b-stage"
            ));
        }
    };
    let mut secs = Vec::new();
    for n in [1, 4, 8].into_iter().filter(|&n| n <= workers) {
        let mut runs = Vec::new();
        for _ in 0..ROUNDS {
            forget(n);
            runs.push(timed(|| {
                let said = c.hvd(&["stage", p, "/shared/b-stage"]);
                assert!(
                    said.starts_with(&format!("staged {files} file(s)")),
                    "{said}"
                );
            }));
        }
        let s = median(runs);
        println!("stage receivers={n} cpus={cpus} secs={s:.2}");
        secs.push((n, s));
    }
    // The tutorials' way: this machine to each worker's /tmp, one after the other.
    let n = secs.last().map_or(1, |s| s.0);
    let scp = timed(|| {
        for i in 1..=n {
            sh(&format!(
                "scp -q -r -F {} {} {name}-worker-{i}:/tmp/",
                cfg.display(),
                data.display()
            ));
        }
    });
    println!("stage way=scp-r workers={n} cpus={cpus} secs={scp:.2}");
    let at = |k: usize| secs.iter().find(|s| s.0 == k).map(|s| s.1);
    let one = at(1).unwrap_or(f64::NAN);
    println!(
        "stage ratio cpus={cpus} 4/1={:.2} 8/1={:.2} scp{n}/stage{n}={:.1}",
        at(4).unwrap_or(f64::NAN) / one,
        at(8).unwrap_or(f64::NAN) / one,
        scp / secs.last().map_or(f64::NAN, |s| s.1)
    );
}
