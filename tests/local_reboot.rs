//! The local provider's reboot of a node: `docker restart` of the node's container, found by
//! the cluster's label and its node name, and what tells the new boot from the old one
//! (`bootstrap::reboot::BOOT_MARK`: the host's boot id stays, PID 1 is new). A plain Debian
//! container with the cluster's label and a node's name stands in for a node (no sshd, no
//! Docker inside: neither is what is tested), so it takes seconds. Needs Docker and the image
//! `hvd-cluster/debian:bookworm` (`scripts/build-images base`); skipped with a line without them.

mod common;

use common::docker_text as docker;
use hvd_cluster::bootstrap::reboot::BOOT_MARK;
use hvd_cluster::provider::local::{LocalProvider, LABEL};

const IMAGE: &str = "hvd-cluster/debian:bookworm";

/// Removes the stand-in node however the test ends.
struct Removed(String);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

#[test]
fn a_local_node_reboots_as_a_container_restart_with_a_new_boot_mark() {
    if docker(&["image", "inspect", IMAGE]).is_err() {
        eprintln!("skipped: tests/local_reboot.rs needs a running Docker engine and {IMAGE}");
        return;
    }
    let cluster = format!("rbt-{}", std::process::id());
    let node = format!("{cluster}-master");
    let label = format!("{LABEL}={cluster}");
    docker(&[
        "run", "-d", "--init", "--name", &node, "--label", &label, IMAGE, "sleep", "infinity",
    ])
    .expect("the stand-in node starts");
    let _removed = Removed(node.clone());
    let mark = || docker(&["exec", &node, "bash", "-c", BOOT_MARK]).expect("the boot mark");
    let started = || docker(&["inspect", "-f", "{{.State.StartedAt}}", &node]).expect("inspect");
    let (mark_before, started_before) = (mark(), started());
    assert_eq!(mark(), mark_before, "the same boot reads the same mark");
    assert_eq!(mark_before.lines().count(), 2, "{mark_before}");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let provider = rt
        .block_on(LocalProvider::connect())
        .expect("docker answers");
    // A name that is not one of the cluster's containers is refused, nothing restarted.
    let e = rt
        .block_on(provider.reboot(&cluster, &[format!("{cluster}-worker-9")]))
        .expect_err("not a node of the cluster");
    assert!(e.to_string().contains("no node container"), "{e}");
    assert_eq!(started(), started_before);

    rt.block_on(provider.reboot(&cluster, std::slice::from_ref(&node)))
        .expect("restarted");
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Running}}", &node]).expect("inspect"),
        "true"
    );
    assert_ne!(started(), started_before, "the container was restarted");
    let mark_after = mark();
    assert_ne!(mark_after, mark_before, "a restart is a new boot");
    // a container shares its host's kernel: the boot id stays, PID 1's start time moves on
    assert_eq!(mark_after.lines().next(), mark_before.lines().next());
}
