//! Bootstrap time on the local provider for 1, 4 and 8 nodes (images already built), with the
//! image's fan-out as a tree (`--fanout 2`, the default) against the star the tool used
//! before (`--fanout 1024`: the master serves every worker) in the same run. Prints, per run,
//!
//!   bootstrap nodes=N fanout=F cpus=C seconds=S bytes_over_link=B
//!   bootstrap nodes=N fanout=F cpus=C re-up seconds=S bytes_over_link=B
//!
//! (S: from "resources ready" to the end of the bootstrap, from `up`'s own progress lines;
//! B: bytes this machine sent to the master for the image; C: each node's CPU share, see
//! below), then
//!
//!   bootstrap ratio fanout=F cpus=C 4/1=R4 8/1=R8
//!
//! and a fan-out plan for 64 workers computed from the measured per-hop rate. Asserts nothing
//! about time.
//!
//! Two modes:
//!
//! - `cpus=uncapped` (the default): every node container may use every core. On this 2-core
//!   machine the nodes' `docker load`s then share the same two cores, so 8 nodes each get a
//!   quarter of what 1 node got, and the ratios show this machine's contention as much as the
//!   tree.
//! - `HVD_BENCH_CPUS=0.25` (any share `HVD_CLUSTER_LOCAL_CPUS` takes): every node of every size
//!   is created with `docker run --cpus 0.25`, so one node gets no more CPU than each of eight;
//!   8 x 0.25 = 2 cores, so the nodes do not compete for CPU. A model of a cloud whose small
//!   VMs each have their own CPU, not a cloud: the disk, the page cache, the bridge network
//!   and this machine's own side (the `up` process, ssh, the image it sends, the engine that
//!   runs the containers) are still shared, so the ratios are still an upper bound.
//!
//! `HVD_CLUSTER_LOCAL_CPUS` in the caller's environment is ignored: only `HVD_BENCH_CPUS`
//! sets it. `HVD_BENCH_LOG_DIR=DIR` keeps each `up`'s progress output (per-step times) there.
//!
//!   cargo bench --bench bootstrap
//!   HVD_BENCH_NODES=1,4 HVD_BENCH_FANOUT=2 cargo bench --bench bootstrap    # a subset
//!   HVD_BENCH_CPUS=0.25 cargo bench --bench bootstrap                       # a CPU each

use std::path::Path;
use std::process::Command;

use hvd_cluster::bootstrap::fanout;

struct Up {
    bootstrap_secs: f64,
    bytes_over_link: u64,
    /// (bytes, seconds) of every master -> worker or worker -> worker hop.
    hops: Vec<(f64, f64)>,
}

/// How every `hvd-cluster` call of the run is made.
struct Run<'a> {
    state: &'a Path,
    /// `HVD_BENCH_CPUS`: each node's CPU share, or `None` for no limit.
    cpus: Option<&'a str>,
}

impl Run<'_> {
    /// As shown in the result lines.
    fn cpus(&self) -> &str {
        self.cpus.unwrap_or("uncapped")
    }
}

fn hvd(run: &Run, fanout: usize, args: &[&str]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"));
    command
        .args(args)
        .env("HVD_CLUSTER_STATE_DIR", run.state)
        .env("HVD_CLUSTER_FANOUT", fanout.to_string());
    match run.cpus {
        Some(cpus) => command.env("HVD_CLUSTER_LOCAL_CPUS", cpus),
        None => command.env_remove("HVD_CLUSTER_LOCAL_CPUS"),
    };
    let out = command.output().expect("run hvd-cluster");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        panic!(
            "hvd-cluster {} failed:\n{}{stderr}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    stderr
}

/// The number after `after` in a line, e.g. `resources ready after 12.3s`.
fn secs_after(line: &str, word: &str) -> Option<f64> {
    line.split(word)
        .nth(1)?
        .split_whitespace()
        .next()?
        .trim_end_matches(',')
        .trim_end_matches('s')
        .parse()
        .ok()
}

/// `image ...: 477.0 MB in 75.0s, 6.4 MB/s` -> (bytes, seconds).
fn transfer(line: &str) -> Option<(f64, f64)> {
    let rest = line.split("image ").nth(1)?;
    let (_, figures) = rest.split_once(": ")?;
    let mut words = figures.split_whitespace();
    let amount: f64 = words.next()?.parse().ok()?;
    let scale = match words.next()? {
        "kB" => 1e3,
        _ => 1e6,
    };
    let _in = words.next()?;
    let secs: f64 = words
        .next()?
        .trim_end_matches(',')
        .trim_end_matches('s')
        .parse()
        .ok()?;
    Some((amount * scale, secs))
}

fn parse_up(log: &str) -> Up {
    let mut ready = None;
    let mut done = None;
    let mut bytes = 0.0;
    let mut hops = Vec::new();
    for line in log.lines() {
        if line.contains("resources ready after") {
            ready = secs_after(line, "after");
        } else if line.contains("bootstrap:") && line.contains("after") {
            done = secs_after(line, "after");
        } else if line.contains("to the master over SSH") {
            bytes += transfer(line).map_or(0.0, |t| t.0);
        } else if line.contains("over plain TCP") {
            hops.extend(transfer(line));
        }
    }
    let (Some(ready), Some(done)) = (ready, done) else {
        panic!("no `resources ready` / `bootstrap:` lines in:\n{log}");
    };
    Up {
        bootstrap_secs: done - ready,
        bytes_over_link: bytes as u64,
        hops,
    }
}

fn list(var: &str, default: &str) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let nodes = list("HVD_BENCH_NODES", "1,4,8");
    let fanouts = list("HVD_BENCH_FANOUT", "1024,2");
    let base =
        std::fs::read_to_string(root.join("profiles/local.toml")).expect("profiles/local.toml");
    let dir = tempfile::tempdir().expect("temp dir");
    let cpus = std::env::var("HVD_BENCH_CPUS").ok();
    let run = Run {
        state: dir.path(),
        cpus: cpus.as_deref().map(str::trim).filter(|c| !c.is_empty()),
    };
    let c = run.cpus();
    let log_dir = std::env::var_os("HVD_BENCH_LOG_DIR").map(std::path::PathBuf::from);
    let keep = |what: &str, n: usize, degree: usize, log: &str| {
        if let Some(dir) = &log_dir {
            let file = dir.join(format!("{what}-nodes{n}-fanout{degree}-cpus{c}.log"));
            std::fs::write(&file, log).expect("write the up's log");
        }
    };
    let mut hops = Vec::new();
    let mut image_bytes = 0u64;
    let mut one_node = None;
    for &degree in &fanouts {
        let mut seconds = Vec::new();
        for &n in &nodes {
            // one node has no worker: the tree changes nothing, measured once
            if n == 1 && degree != fanouts[0] {
                if let Some(s) = one_node {
                    seconds.push((1, s));
                }
                continue;
            }
            let name = format!("bench-boot-{n}");
            let text = base
                .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
                .replace("count = 2", &format!("count = {}", n - 1));
            let profile = dir.path().join(format!("{name}.toml"));
            std::fs::write(&profile, text).expect("write profile");
            let p = profile.to_str().expect("utf-8 path");
            let log = hvd(&run, degree, &["up", p]);
            keep("up", n, degree, &log);
            let first = parse_up(&log);
            let log = hvd(&run, degree, &["up", p]);
            keep("re-up", n, degree, &log);
            let again = parse_up(&log);
            hvd(&run, degree, &["down", "--yes", p]);
            println!(
                "bootstrap nodes={n} fanout={degree} cpus={c} seconds={:.1} bytes_over_link={}",
                first.bootstrap_secs, first.bytes_over_link
            );
            println!(
                "bootstrap nodes={n} fanout={degree} cpus={c} re-up seconds={:.1} bytes_over_link={}",
                again.bootstrap_secs, again.bytes_over_link
            );
            image_bytes = image_bytes.max(first.bytes_over_link);
            hops.extend(first.hops);
            seconds.push((n, first.bootstrap_secs));
            if n == 1 {
                one_node = Some(first.bootstrap_secs);
            }
        }
        let one = seconds.iter().find(|(n, _)| *n == 1).map(|(_, s)| *s);
        let ratios: Vec<String> = seconds
            .iter()
            .filter(|(n, _)| *n != 1)
            .filter_map(|(n, s)| one.map(|o| format!("{n}/1={:.2}", s / o)))
            .collect();
        println!(
            "bootstrap ratio fanout={degree} cpus={c} {}",
            ratios.join(" ")
        );
    }
    // The plan for 64 workers from the slowest measured hop (bytes/s as one stream saw it).
    let rate = hops
        .iter()
        .map(|(b, s)| b / s.max(1e-3))
        .fold(f64::INFINITY, f64::min);
    if rate.is_finite() && image_bytes > 0 {
        let e = fanout::estimate(64, image_bytes, rate, fanout::DEGREE, 0.05);
        println!(
            "fan-out plan for 64 workers (cpus={c}): {:.0} MB at {:.1} MB/s per hop; star (the master serves all 64) {:.0}s; \
             tree (fanout {}, depth {}, pipelined) {:.0}s",
            image_bytes as f64 / 1e6,
            rate / 1e6,
            e.star_secs,
            fanout::DEGREE,
            e.depth,
            e.tree_secs
        );
    }
}
