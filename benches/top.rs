//! What `top` costs: the wall time of one refresh of every node (the reading `top --json`
//! reports as `read_secs`: every node read side by side over connections already open), at
//! two sizes of one cluster, so that the cost of one more node is measured and the time at 64
//! nodes is computed from it; and the CPU one refresh costs a node (its probe script, 50
//! times over on the node, as `top` runs it: through sudo on the master, as the SSH user on a
//! worker), as a share of one core at one refresh a second. Local provider (images built),
//! profiles/local.toml with `HVD_BENCH_WORKERS` workers (default 6), then `scale` to 1.
//! Prints
//!
//!   top provider=local nodes=N read=S nodes=2 read=S per_node=S at64=S ratio=R ssh_held=K
//!   top probe node=master cpu_ms=MS load_at_1hz=P%
//!   top probe node=worker cpu_ms=MS load_at_1hz=P%
//!
//! (`ratio`: the read at N nodes over the read at 2, the baseline of the same run;
//! `ssh_held`: the SSH connections the live view holds open at N nodes) and asserts nothing
//! about time. On the local provider every node's probe runs on this
//! machine's two cores, so the cost per node here is an upper bound: on a cloud each node runs
//! its own probe and only this machine's side grows with the nodes.
//!
//!   cargo bench --bench top
//!   HVD_BENCH_WORKERS=10 cargo bench --bench top

#[path = "common/local.rs"]
mod local;

use std::path::Path;

use base64::Engine as _;
use local::{median, Cluster};

const ROUNDS: usize = 3;

/// The median `read_secs` of `ROUNDS` snapshots (`top --once --json`), and how many nodes
/// each saw answering.
fn read_secs(c: &Cluster, p: &str) -> (f64, usize) {
    let mut secs = Vec::new();
    let mut nodes = 0;
    for _ in 0..ROUNDS {
        let out = c.hvd(&["top", p, "--json"]);
        let snapshot: serde_json::Value = serde_json::from_str(&out).expect("top --json");
        let rows = snapshot["nodes"].as_array().expect("nodes");
        nodes = rows.iter().filter(|n| n["state"] == "ok").count();
        secs.push(snapshot["read_secs"].as_f64().expect("read_secs"));
    }
    (median(secs), nodes)
}

/// CPU seconds (user + system) of one probe on `node`, from 50 runs of it there.
fn probe_cpu(c: &Cluster, p: &str, node: &str, master: bool) -> f64 {
    let script = hvd_cluster::top::probe_script(master);
    let b64 = base64::engine::general_purpose::STANDARD.encode(script);
    let runner = if master { "sudo -n bash" } else { "bash" };
    let command = format!(
        "printf %s {b64} | base64 -d > /tmp/hvd-top-probe.sh && \
         bash -c \"TIMEFORMAT='%3U %3S'; {{ time (for i in \\$(seq 50); do {runner} /tmp/hvd-top-probe.sh > /dev/null 2>&1; done) ; }} 2>&1\"; \
         rm -f /tmp/hvd-top-probe.sh"
    );
    let out = c.hvd(&["ssh", p, node, "--", &command]);
    let fields: Vec<f64> = out
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(fields.len(), 2, "user and system seconds: {out}");
    (fields[0] + fields[1]) / 50.0
}

/// The SSH connections the live view holds open after a few refreshes (its control
/// masters, found by the cluster's folder in their command line), then Ctrl-C.
fn sessions_held(c: &Cluster, p: &str) -> usize {
    let mut view = std::process::Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(["top", p, "--interval", "1"])
        .env("HVD_CLUSTER_STATE_DIR", &c.state)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("top");
    std::thread::sleep(std::time::Duration::from_secs(8));
    let out = std::process::Command::new("pgrep")
        .args(["-f", &format!("ssh .*-M .*{}", c.state.display())])
        .output()
        .expect("pgrep");
    let held = String::from_utf8_lossy(&out.stdout).lines().count();
    let _ = std::process::Command::new("kill")
        .args(["-INT", &view.id().to_string()])
        .status();
    let _ = view.wait();
    held
}

fn main() {
    let workers: usize = std::env::var("HVD_BENCH_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6)
        .max(2);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("a temporary folder");
    let name = format!("btop-{}", std::process::id() % 10_000);
    let profile = dir.path().join("bench.toml");
    let text = std::fs::read_to_string(root.join("profiles/local.toml"))
        .expect("profiles/local.toml")
        .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
        .replace("count = 2", &format!("count = {workers}"));
    std::fs::write(&profile, text).expect("write the profile");
    let p = profile.to_str().expect("a UTF-8 path").to_string();
    let c = Cluster {
        name: name.clone(),
        profile: profile.clone(),
        state: dir.path().join("state"),
    };
    c.hvd(&["up", &p]);
    let master_cpu = probe_cpu(&c, &p, "master", true);
    let worker_cpu = probe_cpu(&c, &p, "worker-1", false);
    let (read_n, n) = read_secs(&c, &p);
    assert_eq!(n, workers + 1, "every node answered");
    let held = sessions_held(&c, &p);
    c.hvd(&["scale", &p, "--workers", "1"]);
    let (read_2, two) = read_secs(&c, &p);
    assert_eq!(two, 2, "the master and one worker answered");
    let per_node = (read_n - read_2) / (n - 2) as f64;
    let at64 = read_2 + per_node * 62.0;
    println!(
        "top provider=local nodes={n} read={read_n:.3} nodes=2 read={read_2:.3} per_node={per_node:.4} at64={at64:.2} ratio={:.2} ssh_held={held}",
        read_n / read_2
    );
    for (node, cpu) in [("master", master_cpu), ("worker", worker_cpu)] {
        println!(
            "top probe node={node} cpu_ms={:.1} load_at_1hz={:.2}%",
            cpu * 1e3,
            cpu * 100.0
        );
    }
}
