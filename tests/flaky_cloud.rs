//! `up --infra-only` and `down` through a flaky cloud: the project's own fault proxy
//! (tests/fault_proxy) in front of the local OpenStack cloud fails a fraction of all API
//! calls (HTTP 500, 503, 429 with Retry-After, a reset before the call reaches the cloud, a
//! reset after it was applied). At 10% each `up` and each `down` converges in one run, in 10
//! of 10 cycles, with no resource made twice and nothing left; at 30% `up` converges or stops
//! with a message that names the call and says `up` resumes, never with a duplicate, and
//! `down` then leaves nothing. Calls and wall time per cycle are printed (`--nocapture`).
//!
//! The cluster is small but has every kind `up --infra-only` makes on OpenStack: keypair,
//! network, subnet, router with its interface, two security groups with their rules, one
//! (fake) server booted from a volume, and its floating IP.
//!
//! Needs the cloud: `tests/cloud/install && tests/cloud/start` (scripts/test does it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Instant;

mod common;
mod fault_proxy;

use common::cloud::{
    client, clouds_yaml, in_api_project, leftovers, require_cloud, runtime, API_CLOUD,
};
use fault_proxy::FaultProxy;
use hvd_cluster::openstack::{OpenStack, Query, ServerFilter, ServerStatus};
use hvd_cluster::provider::openstack::tag;

/// The tests share one project's quota: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A clouds.yaml whose `local-api` (the API tests' project) reaches Keystone through the proxy.
fn clouds_through(proxy: &FaultProxy, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(clouds_yaml()).expect("the local cloud's clouds.yaml");
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("clouds.yaml");
    let url = doc["clouds"][API_CLOUD]["auth"]["auth_url"]
        .as_str()
        .expect("local-api has an auth_url")
        .to_string();
    doc["clouds"][API_CLOUD]["auth"]["auth_url"] =
        serde_yaml_ng::Value::String(proxy.url_for(&url));
    let path = dir.join("clouds.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&doc).expect("yaml")).expect("write");
    path
}

struct Cycle {
    name: String,
    profile: PathBuf,
    state: PathBuf,
    clouds: PathBuf,
}

impl Cycle {
    fn new(dir: &Path, clouds: &Path, n: u32) -> Cycle {
        let name = format!("t-flaky-{}-{n}", std::process::id() % 10000);
        let base = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/local-cloud.toml"),
        )
        .expect("profiles/local-cloud.toml");
        let text = in_api_project(&base)
            .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
            .replace("count = 3", "count = 0")
            // the master boots from a volume: down marks it, waits for it and deletes what
            // Nova left, through the faults too
            .replacen(
                "image = \"debian-12-genericcloud-amd64\"",
                "image = \"debian-12-genericcloud-amd64\"\nroot_volume_gb = 11",
                1,
            )
            .replace("kind = \"manila\"", "kind = \"master-nfs\"")
            .replace("size_gb = 10\n", "");
        let profile = dir.join(format!("{name}.toml"));
        std::fs::write(&profile, text).expect("write the profile");
        Cycle {
            state: dir.join(format!("state-{n}")),
            name,
            profile,
            clouds: clouds.to_path_buf(),
        }
    }

    fn run(&self, args: &[&str], clouds: &Path) -> (Output, f64) {
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
            .args(args)
            .arg(&self.profile)
            .env("HVD_CLUSTER_STATE_DIR", &self.state)
            .env("OS_CLIENT_CONFIG_FILE", clouds)
            .output()
            .expect("run hvd-cluster");
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "$ hvd-cluster {} {}\n--- exit {:?} after {secs:.1}s\n{}{}",
            args.join(" "),
            self.name,
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out, secs)
    }

    fn flaky(&self, args: &[&str]) -> (Output, f64) {
        self.run(args, &self.clouds)
    }

    /// Without the proxy, for cleaning up after a failure.
    fn direct(&self, args: &[&str]) -> (Output, f64) {
        self.run(args, &clouds_yaml())
    }
}

/// Names the cloud holds twice for this cluster (servers, networks, subnets, routers,
/// security groups, floating IPs by description, ports), through the API as the user.
async fn duplicates(os: &OpenStack, cluster: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mine = |n: &str| n.starts_with(&format!("{cluster}-"));
    let servers = os
        .compute()
        .list_servers(&ServerFilter::default())
        .await
        .expect("list servers");
    names.extend(
        servers
            .into_iter()
            .filter(|s| !matches!(s.status, ServerStatus::Deleted | ServerStatus::SoftDeleted))
            .filter_map(|s| s.name)
            .filter(|n| mine(n))
            .map(|n| format!("server {n}")),
    );
    let net = os.network();
    let q = Query::new();
    for n in net.list_networks(&q).await.expect("networks") {
        if mine(&n.name) {
            names.push(format!("network {}", n.name));
        }
    }
    for n in net.list_subnets(&q).await.expect("subnets") {
        if mine(&n.name) {
            names.push(format!("subnet {}", n.name));
        }
    }
    for n in net.list_routers(&q).await.expect("routers") {
        if mine(&n.name) {
            names.push(format!("router {}", n.name));
        }
    }
    for n in net.list_security_groups(&q).await.expect("groups") {
        if mine(&n.name) {
            names.push(format!("security group {}", n.name));
        }
    }
    for f in net.list_floating_ips(&q).await.expect("floating ips") {
        if let Some(d) = f.description.filter(|d| mine(d)) {
            names.push(format!("floating ip {d}"));
        }
    }
    let mut counted: BTreeMap<String, usize> = BTreeMap::new();
    for n in names {
        *counted.entry(n).or_default() += 1;
    }
    counted
        .into_iter()
        .filter(|(_, c)| *c > 1)
        .map(|(n, c)| format!("{n} x{c}"))
        .collect()
}

/// Security group rules of the cluster's groups made twice (same direction, protocol,
/// ports and remote).
async fn duplicate_rules(os: &OpenStack, cluster: &str) -> Vec<String> {
    let mut out = Vec::new();
    let groups = os
        .network()
        .list_security_groups(&Query::new())
        .await
        .expect("groups");
    for g in groups
        .into_iter()
        .filter(|g| g.name.starts_with(&format!("{cluster}-")))
    {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for r in &g.security_group_rules {
            let key = format!(
                "{} {} {:?} {:?}-{:?} {:?} {:?}",
                r.direction,
                r.ethertype,
                r.protocol,
                r.port_range_min,
                r.port_range_max,
                r.remote_ip_prefix,
                r.remote_group_id
            );
            *seen.entry(key).or_default() += 1;
        }
        out.extend(
            seen.into_iter()
                .filter(|(_, c)| *c > 1)
                .map(|(k, c)| format!("{}: rule {k} x{c}", g.name)),
        );
    }
    out
}

/// Resources of the cluster the cloud holds without the cluster's tag, and that `down`
/// would not find by their fixed name either (servers, floating IPs).
async fn untagged(os: &OpenStack, cluster: &str) -> Vec<String> {
    let t = tag(cluster);
    let mut out = Vec::new();
    let servers = os
        .compute()
        .list_servers(&ServerFilter::default())
        .await
        .expect("servers");
    for s in servers {
        let name = s.name.clone().unwrap_or_default();
        if name.starts_with(&format!("{cluster}-")) && !s.tags.contains(&t) {
            out.push(format!("server {name}"));
        }
    }
    out
}

struct Measured {
    rate: f64,
    up_ok: bool,
    down_ok: bool,
    up_calls: u64,
    down_calls: u64,
    up_secs: f64,
    down_secs: f64,
    faults: String,
}

fn report(m: &Measured, label: &str) {
    eprintln!(
        "CYCLE {label} at {:.0}%: up {} in {:.1}s, {} calls; down {} in {:.1}s, {} calls; faults injected: {}",
        m.rate * 100.0,
        if m.up_ok { "converged" } else { "stopped" },
        m.up_secs,
        m.up_calls,
        if m.down_ok { "converged" } else { "stopped" },
        m.down_secs,
        m.down_calls,
        m.faults
    );
}

/// One `up --infra-only` and one `down` at `rate`, each in one run; the cloud checked after
/// each. With `must_converge` both must succeed; otherwise a failed `up` must say why and
/// that `up` resumes, and is cleaned up without the proxy.
fn cycle(
    proxy: &FaultProxy,
    dir: &Path,
    clouds: &Path,
    n: u32,
    rate: f64,
    must_converge: bool,
) -> Measured {
    let rt = runtime();
    let os = rt.block_on(client(API_CLOUD));
    let c = Cycle::new(dir, clouds, n);
    let counts = proxy.cycle(rate, 1000 + u64::from(n));
    let (up, up_secs) = c.flaky(&["up", "--infra-only"]);
    let up_calls = counts.calls();
    let mut faults = counts
        .faults()
        .iter()
        .map(|(f, k)| format!("{f:?} {k}"))
        .collect::<Vec<_>>()
        .join(", ");

    let dups = rt.block_on(duplicates(&os, &c.name));
    let dup_rules = rt.block_on(duplicate_rules(&os, &c.name));
    let lost_tags = rt.block_on(untagged(&os, &c.name));
    let stderr = String::from_utf8_lossy(&up.stderr).to_string();
    let up_ok = up.status.success();

    let counts = proxy.cycle(rate, 2000 + u64::from(n));
    let (down, down_secs) = c.flaky(&["down", "--yes"]);
    let down_calls = counts.calls();
    faults.push_str(&format!(
        " | down: {}",
        counts
            .faults()
            .iter()
            .map(|(f, k)| format!("{f:?} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let down_ok = down.status.success();
    if !down_ok && !must_converge {
        c.direct(&["down", "--yes"]);
    }
    let left = rt.block_on(leftovers(&os, &c.name));
    let m = Measured {
        rate,
        up_ok,
        down_ok,
        up_calls,
        down_calls,
        up_secs,
        down_secs,
        faults,
    };
    report(&m, &n.to_string());

    assert_eq!(dups, Vec::<String>::new(), "a resource was made twice");
    assert_eq!(dup_rules, Vec::<String>::new(), "a rule was made twice");
    assert_eq!(lost_tags, Vec::<String>::new(), "untagged servers");
    if must_converge {
        assert!(up_ok, "up did not converge in one run at {rate}: {stderr}");
        assert!(down_ok, "down did not converge in one run at {rate}");
    } else if !up_ok {
        assert!(
            stderr.contains("running `up` again resumes"),
            "a failed up says that up resumes: {stderr}"
        );
        assert!(
            ["POST ", "PUT ", "GET ", "DELETE "]
                .iter()
                .any(|m| stderr.contains(m)),
            "a failed up names the call: {stderr}"
        );
    }
    assert_eq!(left, Vec::<String>::new(), "down left something");
    m
}

fn setup() -> (FaultProxy, tempfile::TempDir, PathBuf) {
    require_cloud();
    let proxy = FaultProxy::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let clouds = clouds_through(&proxy, dir.path());
    (proxy, dir, clouds)
}

#[test]
fn no_faults_baseline() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (proxy, dir, clouds) = setup();
    cycle(&proxy, dir.path(), &clouds, 0, 0.0, true);
}

#[test]
fn ten_percent_faults_converge_in_one_run_ten_times() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (proxy, dir, clouds) = setup();
    let started = Instant::now();
    let mut total_calls = 0;
    for n in 1..=10 {
        let m = cycle(&proxy, dir.path(), &clouds, n, 0.10, true);
        total_calls += m.up_calls + m.down_calls;
    }
    eprintln!(
        "10 cycles at 10%: {total_calls} calls, {:.0}s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn thirty_percent_faults_converge_or_say_why() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (proxy, dir, clouds) = setup();
    cycle(&proxy, dir.path(), &clouds, 30, 0.30, false);
}

#[test]
fn catalog_urls_go_through_the_proxy() {
    assert_eq!(
        fault_proxy::rewrite_url("http://127.0.0.1:9696/", 4000).as_deref(),
        Some("http://127.0.0.1:4000/_u/9696/")
    );
    assert_eq!(
        fault_proxy::rewrite_url("http://localhost:8774/v2.1", 4000).as_deref(),
        Some("http://127.0.0.1:4000/_u/8774/v2.1")
    );
    assert_eq!(
        fault_proxy::rewrite_url("https://cloud.example/v3", 4000),
        None
    );
}
