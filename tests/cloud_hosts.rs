//! The tool's main job whole, against the project's real local OpenStack cloud whose
//! servers are real hosts (tests/cloud: Nova's test driver runs each server booted from
//! `hvd-node-bookworm` as a node container at its Neutron address; floating IPs reach it):
//! `up` with profiles/local-cloud-hosts.toml creates everything through the APIs, reaches
//! the master by its floating IP and the workers through it, runs Horovod on every host and
//! prints a Jupyter URL that answers; `down` leaves nothing behind, in the cloud or in
//! Docker. A second test deletes a worker server as admin during an elastic run (a
//! preemption) and `heal` replaces it.
//!
//! Needs the cloud and the node image: `tests/cloud/install && tests/cloud/start &&
//! scripts/build-images` (scripts/test does all three).

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::cloud::{client, leftovers, require_cloud, runtime};
use common::{http_get, ElasticJob, TestCluster};

/// Both tests run several node containers with their own Docker engines: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn require_node_image() {
    let built = Command::new("docker")
        .args(["image", "inspect", "hvd-cluster/node:bookworm"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        built,
        "the local cloud's servers run the node image, which is not built: run scripts/build-images"
    );
}

/// Node containers the cloud's compute driver runs.
fn cloud_containers() -> BTreeSet<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter", "label=hvd-cloud=1"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

fn server_id(c: &TestCluster, name: &str) -> String {
    let status = c.status_json();
    status["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "server" && r["name"] == name)
        .and_then(|r| r["id"].as_str())
        .unwrap_or_else(|| panic!("no server {name} in {status:#}"))
        .to_string()
}

/// `down` (also after a failed test), then: nothing of the cluster left in the cloud (as the
/// user sees it) and no node container beyond those there `before`; a test's own failure first.
fn down_leaves_nothing(
    c: &TestCluster,
    before: &BTreeSet<String>,
    result: std::thread::Result<()>,
) {
    let down = c.hvd(&["down", &c.profile]);
    let rt = runtime();
    let os = rt.block_on(client("local-user"));
    let left = rt.block_on(leftovers(&os, &c.name));
    let after = cloud_containers();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(down.status.success());
    assert_eq!(
        left,
        Vec::<String>::new(),
        "down leaves nothing in the cloud"
    );
    assert_eq!(
        after.difference(before).count(),
        0,
        "down leaves no node container"
    );
}

#[test]
fn up_on_the_cloud_gives_a_working_cluster_and_down_leaves_nothing() {
    require_cloud();
    require_node_image();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = TestCluster::new("local-cloud-hosts.toml", "t-hosts", |p| p);
    let nodes = [
        format!("{}-master", c.name),
        format!("{}-worker-1", c.name),
        format!("{}-worker-2", c.name),
    ];
    let before = cloud_containers();
    let result = std::panic::catch_unwind(|| {
        let up = c.hvd(&["up", &c.profile]);
        assert!(up.status.success());
        let out = String::from_utf8_lossy(&up.stdout);

        // Horovod ran one rank on each of the three hosts.
        let check = out
            .lines()
            .find(|l| l.starts_with("check:"))
            .expect("up prints the check");
        assert!(check.contains("3 rank(s) joined"), "{check}");
        for n in &nodes {
            assert!(check.contains(n.as_str()), "{n} missing from: {check}");
        }

        // The Jupyter URL is on the master's floating IP and answers from this machine.
        let url = out
            .lines()
            .find_map(|l| l.strip_prefix("Jupyter Lab: "))
            .expect("up prints the Jupyter URL");
        assert!(url.starts_with("http://203.0.113."), "{url}");
        let (status, body) = http_get(url);
        assert!(status.contains(" 200 "), "{status}");
        assert!(body.contains("JupyterLab"), "{body}");

        // SSH reaches the master by its floating IP and the workers through the master.
        let config = c.hvd(&["ssh-config", &c.profile]);
        let config = String::from_utf8_lossy(&config.stdout);
        let block = |n: &str| {
            config
                .split("Host ")
                .find(|b| b.starts_with(&format!("{n}\n")) || b.starts_with(&format!("{n} ")))
                .unwrap_or_else(|| panic!("no Host {n} in:\n{config}"))
                .to_string()
        };
        assert!(block(&nodes[0]).contains("HostName 203.0.113."), "{config}");
        assert!(block(&nodes[1]).contains("ProxyJump"), "{config}");

        // Each node booted with the tool's user_data, run by cloud-init.
        let node_json = c.on_node("worker-2", &["cat", "/etc/hvd-cluster/node.json"]);
        assert!(
            node_json.contains(&format!("\"node\": \"{}\"", nodes[2])),
            "{node_json}"
        );
        assert!(node_json.contains("\"role\": \"worker\""), "{node_json}");

        // Up again changes nothing and the check still passes.
        let again = c.hvd(&["up", &c.profile]);
        assert!(again.status.success());
        assert!(
            String::from_utf8_lossy(&again.stderr).contains("nothing to change"),
            "a second up finds every resource"
        );
    });
    down_leaves_nothing(&c, &before, result);
}

#[test]
fn heal_replaces_a_worker_deleted_by_the_cloud_during_an_elastic_run() {
    require_cloud();
    require_node_image();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = TestCluster::new("local-cloud-hosts.toml", "t-preempt", |p| {
        p.replace("10.61.0.0/24", "10.62.0.0/24")
    });
    let rt = runtime();
    let before = cloud_containers();
    let result = std::panic::catch_unwind(|| {
        assert!(c.hvd(&["up", &c.profile]).status.success());
        let mut job = ElasticJob::start(&c, 3);
        job.wait_size(2, Duration::from_secs(300));

        // A preemption: the cloud deletes a worker's server (as its admin would).
        let victim = format!("{}-worker-1", c.name);
        let id = server_id(&c, &victim);
        let admin = rt.block_on(client("local-admin"));
        rt.block_on(admin.compute().delete_server(&id))
            .expect("admin deletes the worker's server");
        job.wait_size(1, Duration::from_secs(180));

        let heal = c.hvd(&["heal", &c.profile]);
        assert!(heal.status.success());
        let healed = String::from_utf8_lossy(&heal.stdout);
        assert!(healed.contains(&victim), "{healed}");
        job.wait_size(2, Duration::from_secs(300));
        assert_eq!(
            c.listed_in_discovery(),
            [2, 3].map(|i| format!("{}-worker-{i}", c.name))
        );
        let sizes = job.stop_and_verify(&c);
        assert!(sizes.contains(&1) && sizes.contains(&2), "{sizes:?}");
    });
    down_leaves_nothing(&c, &before, result);
}
