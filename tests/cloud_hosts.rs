//! The tool's main job whole, against the project's real local OpenStack cloud whose
//! servers are real hosts (tests/cloud: Nova's test driver runs each server booted from
//! `hvd-node-bookworm` as a node container at its Neutron address; floating IPs reach it):
//! `up` with profiles/local-cloud-hosts.toml creates everything through the APIs, reaches
//! the master by its floating IP and the workers through it, runs Horovod on every host and
//! prints a Jupyter URL that answers; `down` leaves nothing behind, in the cloud or in
//! Docker. `[lifecycle] autostop` is on from the first `up`; it is turned off and on again
//! with `up`, and the agent on the master keeps the cluster up while a job runs and stops it
//! (every server shelved and offloaded) once it has been idle, through the cloud's API with
//! the credential limited to the cluster's servers. `start` then brings the servers back with
//! new host keys, each vouched for by its console. On the same cluster (one cluster for the
//! whole file: each `up` of three node containers costs minutes of the suite's 2 cores), a
//! worker server is deleted as admin during an elastic run (a preemption): `heal` replaces it
//! and renews the agent's credential. A worker baked on the way is the image of a
//! second, one-node cluster after the first one's `down`, which refuses the first one's keys.
//!
//! Needs the cloud and the node image: `tests/cloud/install && tests/cloud/start &&
//! scripts/build-images` (scripts/test does all three).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::cloud::{
    client, leftovers, lifecycle, require_cloud, runtime, server_states, with_autostop, MasterFiles,
};
use common::registry::{Registry, OUR_IMAGE};
use common::{ElasticJob, TestCluster};
use hvd_cluster::openstack::{CloudConfig, OpenStack, Request, Secret, Service};
use hvd_cluster::provider::openstack::credential::MadeCredential;

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

/// Each of `nodes` is one server of the cluster, as `status` lists them from the cloud: no
/// command interrupted and run again made a second one.
fn one_server_each(c: &TestCluster, nodes: &[String]) {
    let status = c.status_json();
    let mut servers: Vec<&str> = status["resources"]
        .as_array()
        .expect("status lists resources")
        .iter()
        .filter(|r| r["kind"] == "server")
        .filter_map(|r| r["name"].as_str())
        .collect();
    servers.sort_unstable();
    let mut want: Vec<&str> = nodes.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(servers, want, "{status:#}");
}

/// `down` (also after a failed test), then: nothing of the cluster left in the cloud (as the
/// user sees it) and no node container beyond those there `before`; a test's own failure first.
/// Returns the names of the cluster's bakes, which `down` leaves (they are the user's; a failed
/// test's are deleted here, a passing one's by `bake --delete`).
fn down_leaves_nothing(
    c: &TestCluster,
    before: &BTreeSet<String>,
    result: std::thread::Result<()>,
) -> Vec<String> {
    let down = c.hvd(&["down", "--yes", &c.profile]);
    let rt = runtime();
    let os = rt.block_on(client("local-user"));
    let left = rt.block_on(leftovers(&os, &c.name));
    let after = cloud_containers();
    let bakes = rt
        .block_on(os.image().list_by_property("hvd_bake_cluster", &c.name))
        .unwrap_or_default();
    let mut baked = Vec::new();
    for image in &bakes {
        if image["hvd_bake_cluster"] != c.name.as_str() {
            continue;
        }
        baked.push(image["name"].as_str().unwrap_or("?").to_string());
        if let (Err(_), Some(id)) = (&result, image["id"].as_str()) {
            let _ = rt.block_on(os.image().delete_image(id));
        }
    }
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
    baked
}

#[test]
fn up_on_the_cloud_gives_a_working_cluster_and_down_leaves_nothing() {
    require_cloud();
    require_node_image();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // autostop from the first `up` on, long enough not to stop the cluster during the checks
    let c = TestCluster::new("local-cloud-hosts.toml", "t-hosts", |p| {
        p + &lifecycle("10m")
    });
    let nodes = [
        format!("{}-master", c.name),
        format!("{}-worker-1", c.name),
        format!("{}-worker-2", c.name),
    ];
    let before = cloud_containers();
    // The cluster's private keys, copied once `up` made them: `down` takes its folder, and the
    // second cluster from the bake must refuse them.
    let first_keys = tempfile::tempdir().expect("a folder for the first cluster's keys");
    let result = std::panic::catch_unwind(|| {
        // The first `up` is killed during the bootstrap, once a worker mounted /shared: the
        // image is then usually still on its way to the master, its file there partial.
        // The same command again finishes the cluster, with one server and one
        // node container for each node.
        common::interrupt::at_marker(
            c.command(&["up", &c.profile]),
            "-KILL",
            &format!("{}: shared applied", nodes[1]),
            Duration::from_secs(1800),
        );
        let up = c.hvd_ok(&["up", &c.profile]);
        keep_the_keys(&c, first_keys.path());
        one_server_each(&c, &nodes);
        assert_eq!(
            cloud_containers().difference(&before).count(),
            nodes.len(),
            "one node container per server after the resumed up"
        );
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

        // The Jupyter URL is on the master's floating IP, over HTTPS with the certificate whose
        // fingerprint `up` printed, and answers from this machine; plain HTTP gets no Jupyter.
        let url = out
            .lines()
            .find_map(|l| l.strip_prefix("Jupyter Lab: "))
            .expect("up prints the Jupyter URL");
        common::jupyter::https_only(&c, url, &out);

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

        // The containers' key opens the containers' sshd, never a host's.
        common::container_key::opens_no_host(&c, "debian", 12345, &nodes);

        // Up again changes no resource; autostop off, on, and the cluster stopping itself.
        autostop_keeps_it_up_while_busy_and_stops_it_when_idle(
            &c,
            &String::from_utf8_lossy(&up.stderr),
        );
        start_vouches_for_new_host_keys(&c, &nodes);
        let baked = bake_a_worker_and_boot_the_workers_from_it(&c);
        heal_replaces_a_worker_deleted_by_the_cloud_during_an_elastic_run(&c, &baked);
        stop_killed_after_the_workers_is_finished_by_stop(&c);
    });
    let bakes = down_leaves_nothing(&c, &before, result);
    assert_eq!(bakes, [format!("{}-bake", c.name)], "down leaves the bake");
    let second = std::panic::catch_unwind(|| {
        a_second_cluster_from_the_bake_refuses_the_first_ones_keys(
            first_keys.path(),
            &bakes[0],
            &before,
        )
    });
    if let Err(panic) = second {
        let _ = c.hvd(&["bake", &c.profile, "--delete", &bakes[0], "--yes"]);
        std::panic::resume_unwind(panic);
    }
    a_bake_is_deleted_once_asked(&c, &bakes[0]);
}

/// The cluster's login key and container key (private), copied into `to`.
fn keep_the_keys(c: &TestCluster, to: &Path) {
    for key in ["id_ed25519", "container_ed25519"] {
        std::fs::copy(c.state.join(&c.name).join(key), to.join(key)).expect(key);
    }
}

/// A second cluster from worker-1's bake, after the first one's `down` (the bake's safety
/// proven on a cluster of another name and keys, not only by the image's search). One node
/// (the suite's two cores) with two slots (the suite's master of more than one slot: a rank
/// more here is seconds, under the VM test's emulation minutes): its master boots from the
/// bake, reaches a passing check of two ranks, `status` shows its two slots, and it runs a
/// Horovod job on both with nothing installed or sent to it; then, jumping through its sshd with the
/// second cluster's login key, the node's sshd refuses the first cluster's login key and its
/// container's sshd the first cluster's container key, where the second cluster's own keys
/// open them (so a refusal is the key's, not a wrong address or a broken jump).
fn a_second_cluster_from_the_bake_refuses_the_first_ones_keys(
    first_keys: &Path,
    bake: &str,
    before: &BTreeSet<String>,
) {
    let c = TestCluster::new("local-cloud-hosts.toml", "t-again", |p| {
        let master = "[master]\nflavor = \"m1.medium\"\nimage = \"hvd-node-bookworm\"\n";
        let workers =
            "[workers]\ncount = 2\nflavor = \"m1.small\"\nimage = \"hvd-node-bookworm\"\n";
        assert!(p.contains(master) && p.contains(workers), "{p}");
        p.replace(
            master,
            &format!("[master]\nflavor = \"m1.medium\"\nimage = \"{bake}\"\nslots = 2\n"),
        )
        .replace(
            workers,
            &format!("[workers]\ncount = 0\nflavor = \"m1.small\"\nimage = \"{bake}\"\n"),
        )
    });
    let master = format!("{}-master", c.name);
    let result = std::panic::catch_unwind(|| {
        let started = Instant::now();
        let up = c.hvd(&["up", &c.profile]);
        eprintln!(
            "bench: up of a second cluster (1 node) from the bake took {:.0}s",
            started.elapsed().as_secs_f64()
        );
        let said = String::from_utf8_lossy(&up.stderr).into_owned();
        let out = String::from_utf8_lossy(&up.stdout).into_owned();
        assert!(up.status.success(), "{said}");
        assert!(
            said.contains(&format!(
                "{master}: booted from the bake {bake}: Docker and the image already here"
            )),
            "{said}"
        );
        assert!(
            !said.contains(&format!("-> {master}")),
            "nothing sent: {said}"
        );
        let check = out
            .lines()
            .find(|l| l.starts_with("check:"))
            .expect("up prints the check");
        assert!(check.contains("2 rank(s) joined"), "{check}");
        assert!(check.contains(&master), "{check}");
        // `status` shows the slots the profile gave the master, as the check used them (not
        // the provider's one per GPU).
        let status = c.status_json();
        assert_eq!(status["nodes"][0]["slots"], 2, "the master's two slots");

        // A job: Horovod's two ranks on the node.
        let job_dir = tempfile::tempdir().unwrap();
        let script = job_dir.path().join("joined.py");
        std::fs::write(
            &script,
            "import horovod.tensorflow as hvd\nhvd.init()\nprint('joined', hvd.rank(), hvd.size())\n",
        )
        .unwrap();
        let job = c.hvd(&[
            "run",
            &c.profile,
            "--send",
            script.to_str().unwrap(),
            "--",
            "python",
            "joined.py",
        ]);
        let job_out = String::from_utf8_lossy(&job.stdout);
        assert!(job.status.success(), "{job:?}");
        assert!(
            job_out.contains("joined 0 2") && job_out.contains("joined 1 2"),
            "{job_out}"
        );

        // The first cluster's keys, against the second's.
        let second_keys = c.state.join(&c.name);
        let master_address = status["nodes"]
            .as_array()
            .and_then(|all| all.iter().find(|n| n["name"] == master.as_str()))
            .and_then(|n| n["public_ip"].as_str())
            .unwrap_or_else(|| panic!("the master's floating IP in status --json: {status}"))
            .to_string();
        let address = common::private_ip(&c, "master");
        let jump_key = second_keys.join("id_ed25519");
        for (key, port, user) in [
            ("id_ed25519", 22, "debian"),
            ("container_ed25519", 12345, "root"),
        ] {
            let target = format!("{user}@{address}");
            // the cluster's `key` (its own keys' folder) tried at `port`, jumping with its own
            let with = |keys: &Path| {
                through_the_master(&jump_key, &master_address, &keys.join(key), port, &target)
            };
            let opens = with(&second_keys);
            assert!(
                opens.contains("opened"),
                "the second cluster's {key} opens port {port}: {opens}"
            );
            let refused = with(first_keys);
            assert!(
                !refused.contains("opened") && refused.contains("Permission denied"),
                "the first cluster's {key} is refused at port {port}: {refused}"
            );
        }
    });
    let bakes = down_leaves_nothing(&c, before, result);
    assert!(bakes.is_empty(), "{bakes:?}");
}

/// `ssh -p PORT -i KEY TARGET echo opened`, jumping through the master's sshd at its floating
/// IP with `jump_key`; what ssh and the command said.
fn through_the_master(
    jump_key: &Path,
    master: &str,
    key: &Path,
    port: u16,
    target: &str,
) -> String {
    let plain = "-o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=no \
                 -o UserKnownHostsFile=/dev/null -o ConnectTimeout=20";
    let jump = format!(
        "ssh {plain} -i {} -W %h:%p debian@{master}",
        jump_key.display()
    );
    let mut args: Vec<String> = plain.split_whitespace().map(str::to_string).collect();
    args.extend([
        "-o".into(),
        format!("ProxyCommand={jump}"),
        "-i".into(),
        key.display().to_string(),
        "-p".into(),
        port.to_string(),
        target.into(),
        "echo".into(),
        "opened".into(),
    ]);
    let out = Command::new("ssh").args(&args).output().expect("ssh runs");
    format!(
        "exit {:?}: {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// After `down`: `bake --delete` without a terminal and without `--yes` deletes nothing (exit
/// 2); with `--yes` the bake goes and `--list` no longer shows it.
fn a_bake_is_deleted_once_asked(c: &TestCluster, name: &str) {
    let line = common::one_error_line(&c.hvd(&["bake", &c.profile, "--delete", name]), 2);
    assert!(
        line.contains("nothing deleted: no terminal to ask on") && line.contains("--yes"),
        "{line}"
    );
    let delete = c.hvd(&["bake", &c.profile, "--delete", name, "--yes"]);
    let out = String::from_utf8_lossy(&delete.stdout);
    assert!(
        delete.status.success()
            && out.contains(&format!("bake: {name} ("))
            && out.contains(") deleted"),
        "{out}{}",
        String::from_utf8_lossy(&delete.stderr)
    );
    let list = c.hvd(&["bake", &c.profile, "--list"]);
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    assert!(!listed.contains(&format!("{name} (")), "{listed}");
}

/// `start` after the agent's stop: unshelved, the real-host servers come back as new
/// containers with new host keys, and /shared with the file the job wrote before the stop. A first `start` is killed once its calls started them:
/// `check` then says which command finishes the job, not that someone may be
/// between the user and the nodes; the next `start` vouches for each node's new key against
/// its console, read through Nova's API, says so per node and reaches a passing check. Then a
/// key changed behind the tool's back (no server renewed by any command) stops the next
/// command with the warning.
fn start_vouches_for_new_host_keys(c: &TestCluster, nodes: &[String]) {
    with_autostop(c, "off"); // the agent would stop the cluster again while this runs
    let workers_started = format!("started {}", nodes[1]);
    common::interrupt::at_marker(
        c.command(&["start", &c.profile]),
        "-KILL",
        &workers_started,
        Duration::from_secs(900),
    );
    let check = c.hvd(&["check", &c.profile]);
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(!check.status.success(), "{err}");
    assert!(
        err.contains("its SSH host key changed to SHA256:")
            && err.contains("the server was started again by a command that did not finish")
            && err.contains("`hvd-cluster start`")
            && !err.contains("someone may be between"),
        "{err}"
    );
    // `run` says the same; `ssh` (OpenSSH's own warning follows) says first which command
    // finishes the job.
    let run = c.hvd(&["run", &c.profile, "--", "true"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success()
            && err.contains("the server was started again by a command that did not finish"),
        "{err}"
    );
    let ssh = c.hvd(&["ssh", &c.profile, "master", "--", "true"]);
    let err = String::from_utf8_lossy(&ssh.stderr);
    assert!(
        !ssh.status.success()
            && err.contains(&format!(
                "note: {} was started again by a command that did not finish",
                nodes[0]
            )),
        "{err}"
    );
    // The next `start` gets Ctrl-C once it vouched for a first node's key (the others' consoles
    // are read at the same time, so some may be vouched for too): the one after it vouches for
    // the rest, and a key vouched for once is not asked about again.
    let interrupted = common::interrupt::at_marker(
        c.command(&["start", &c.profile]),
        "-INT",
        ": new SSH host key SHA256:",
        Duration::from_secs(900),
    );
    let start = c.hvd(&["start", &c.profile]);
    let (out, err) = (
        String::from_utf8_lossy(&start.stdout),
        String::from_utf8_lossy(&start.stderr),
    );
    assert!(start.status.success(), "{err}");
    assert!(out.contains("3 rank(s) joined"), "{out}");
    for n in nodes {
        // what both runs said of this node's key
        let lines: Vec<&str> = interrupted
            .iter()
            .map(String::as_str)
            .chain(err.lines())
            .filter(|l| l.contains(&format!("] {n}: new SSH host key SHA256:")))
            .collect();
        assert_eq!(lines.len(), 1, "{n} vouched for once: {lines:?}\n{err}");
        assert!(
            lines[0].ends_with(
                "(the server was started again by a command that did not finish), vouched for by its console"
            ),
            "{}", lines[0]
        );
    }
    // What the job wrote to /shared before the agent stopped the cluster is still there, on
    // the master and through the share on a worker (the cloud keeps a server's disks across
    // shelve and unshelve, as a real one does).
    for node in ["master", "worker-2"] {
        assert_eq!(
            c.on_node(node, &["cat", "/shared/kept.txt"]).trim(),
            "kept",
            "/shared on {node} after stop and start"
        );
    }
    let master = &nodes[0];
    let container = format!("hvd-nova-{}", server_id(c, master));
    let offered = common::new_host_keys_behind_the_tools_back(&container);
    common::stops_on_changed_host_key(c, master, &offered);
    c.on_node("master", &["true"]);
}

/// `stop` killed once it shelved the workers, before the master: the same command
/// again stops the master alone, and every server is stopped; `down` then deletes them.
fn stop_killed_after_the_workers_is_finished_by_stop(c: &TestCluster) {
    let said = common::interrupt::at_marker(
        c.command(&["stop", &c.profile]),
        "-KILL",
        &format!("stopped {}-worker", c.name),
        Duration::from_secs(900),
    );
    // The archive the master kept (since `start` sent the image to every node) goes first:
    // not into its shelve snapshot.
    let removed = format!(
        "{}-master: removed the image's archive kept for scale and heal (",
        c.name
    );
    assert!(said.iter().any(|l| l.contains(&removed)), "{said:?}");
    let stop = c.hvd(&["stop", &c.profile]);
    let out = String::from_utf8_lossy(&stop.stdout);
    assert!(stop.status.success(), "{out}");
    let err = String::from_utf8_lossy(&stop.stderr);
    assert!(
        out.contains("stopped 1 server(s)")
            && !err.contains(&format!("stopped {}-worker", c.name))
            && !err.contains(&removed),
        "the master alone, nothing left to remove: {out}{err}"
    );
    let rt = runtime();
    let os = rt.block_on(client("local-user"));
    let states = server_states(&os, &rt, &c.name);
    assert!(
        states.len() == 3 && states.iter().all(|s| s.starts_with("ShelvedOffloaded/")),
        "{states:?}"
    );
    // Nothing runs to bake: refused as bad input.
    let line = common::one_error_line(&c.hvd(&["bake", &c.profile]), 2);
    assert!(
        line.contains("is stopped") && line.contains("`--temporary` bakes on a server of its own"),
        "{line}"
    );
}

/// What the bake left for heal's replacement to be checked against.
struct Baked {
    name: String,
    /// worker-1's SSH host key (public) when it was baked.
    host_key: String,
}

/// `bake` of worker-1 in the running cluster: its keys, files, containers and logs
/// set aside on a tmpfs while the test cloud's compute driver snapshots it (the node container
/// committed, its Docker volume copied: tests/cloud/dockervirt, a stand-in for a disk
/// snapshot), then put back, its container made again by `up` and the check passed. A second
/// `bake` finds the same image by its key. The image is private, says what it holds, and no
/// file of it (the committed image's file system and the copied Docker volume, read byte for
/// byte) holds the cluster's login key, container key, worker-1's host key or the login key's
/// authorized_keys line. A name another image holds is refused first, before the node is
/// touched. The profile's workers then boot from it: heal's replacement below.
fn bake_a_worker_and_boot_the_workers_from_it(c: &TestCluster) -> Baked {
    let worker = format!("{}-worker-1", c.name);
    let name = format!("{}-bake", c.name);
    let host_key = c.on_node("worker-1", &["cat /etc/ssh/ssh_host_ed25519_key.pub"]);
    let host_private = c.on_node("worker-1", &["sudo cat /etc/ssh/ssh_host_ed25519_key"]);
    let image_id = c.on_node(
        "worker-1",
        &[&format!(
            "sudo docker image inspect -f '{{{{.Id}}}}' {OUR_IMAGE}"
        )],
    );
    // A name another image holds: refused before worker-1 is touched (a profile naming it
    // would find two).
    let line = common::one_error_line(
        &c.hvd(&[
            "bake",
            &c.profile,
            "--node",
            "worker-2",
            "--name",
            "hvd-node-bookworm",
        ]),
        2,
    );
    assert!(
        line.contains("the name `hvd-node-bookworm` is taken by ") && line.contains("nothing made"),
        "{line}"
    );
    assert!(
        c.on_node("worker-1", &["sudo docker ps --format '{{.Names}}'"])
            .contains("hvd"),
        "the refused bake left worker-1's container running"
    );

    let made = common::bake_node(c, &worker, &name, &[]);
    assert!(made.check.contains("3 rank(s) joined"), "{}", made.check);
    let id = made.id;
    // worker-1 as it was: its host key, its files, nothing left on the tmpfs
    assert_eq!(
        c.on_node("worker-1", &["cat /etc/ssh/ssh_host_ed25519_key.pub"]),
        host_key
    );
    assert_eq!(
        c.on_node(
            "worker-1",
            &["test -s /etc/hvd-cluster/node.json && ! test -e /etc/hvd-cluster-bake && ! test -e /run/hvd-bake && echo back"]
        )
        .trim(),
        "back"
    );

    // The same contents: the same image, found.
    let again = c.hvd(&["bake", &c.profile]);
    let again_out = String::from_utf8_lossy(&again.stdout).into_owned();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let found = again_out
        .lines()
        .find(|l| l.starts_with(&format!("bake: {name} ({id})")))
        .unwrap_or_else(|| panic!("the same image again: {again_out}"));
    assert!(
        found.contains(&format!(", found from {worker} in ")),
        "{found}"
    );

    // The image: private, this project's, what it holds in its properties.
    let rt = runtime();
    let os = rt.block_on(client("local-user"));
    let images = rt
        .block_on(os.image().list_by_property("hvd_bake_node", &worker))
        .expect("list the bakes");
    assert_eq!(images.len(), 1, "one bake: {images:#?}");
    let image = &images[0];
    assert_eq!(image["id"], id.as_str());
    assert_eq!(image["status"], "active");
    assert_eq!(image["visibility"], "private");
    assert_eq!(image["hvd_bake_horovod_image"], image_id.trim());
    assert_eq!(image["hvd_bake_cluster"], c.name.as_str());
    // the server image by its id (a new image under the same name is another source)
    let source = image["hvd_bake_source_image"].as_str().unwrap_or_default();
    assert!(
        source.len() == 36 && source.matches('-').count() == 4,
        "{source}"
    );
    // Its files, as the test cloud keeps them: the committed node image and its Docker volume.
    let tag = image["hvd_docker_image"]
        .as_str()
        .expect("the snapshot's image");
    let volume = image["hvd_docker_volume"]
        .as_str()
        .expect("the snapshot's volume");
    let secrets = common::bake_secrets(c, &host_private, &host_key);
    let ctr = format!("{}-bake-read", c.name);
    let _ = Command::new("docker")
        .args(["rm", "-f", "-v", &ctr])
        .output();
    let created = Command::new("docker")
        .args(["create", "--name", &ctr, "--entrypoint", "true", tag])
        .output()
        .expect("docker create");
    assert!(created.status.success(), "{created:?}");
    // every file of the committed image, as one stream (lines holding a secret, counted)...
    let in_files = common::searched(
        &format!(
            "docker export {ctr} | grep -a -c -F -f \"$PATTERNS\"; test ${{PIPESTATUS[0]}} = 0"
        ),
        &secrets,
    );
    // ...and of the volume, read where Docker keeps it on this machine (files named)
    let in_docker = common::searched(
        &format!(
            "grep -r -a -l -D skip -F -f \"$PATTERNS\" \"$(docker volume inspect -f '{{{{.Mountpoint}}}}' {volume})\"; \
             test $? = 1"
        ),
        &secrets,
    );
    let paths = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "sh",
            tag,
            "-c",
        ])
        .arg(
            "ls -d /etc/hvd-cluster /etc/ssh/ssh_host_* /home/debian/.ssh/authorized_keys \
             /var/lib/cloud/instance /run/hvd-bake/aside 2>/dev/null; cat /etc/hvd-cluster-bake",
        )
        .output()
        .expect("read the bake's paths");
    let _ = Command::new("docker")
        .args(["rm", "-f", "-v", &ctr])
        .output();
    assert_eq!(
        (in_files.as_str(), in_docker.as_str()),
        ("0", ""),
        "no byte of the cluster's keys or the node's host key in the bake (lines of the \
         committed image {tag} that hold one; files of the volume {volume}; `grep -rl` in a \
         container of {tag} names the image's files)"
    );
    let paths = String::from_utf8_lossy(&paths.stdout).into_owned();
    assert_eq!(
        paths,
        format!("bake={name}\nimage={}\n", image_id.trim()),
        "nothing of the cluster's or the boot's in the bake's file system, but its marker"
    );

    // From here on the workers boot from the bake (the master keeps the stock image).
    let text = std::fs::read_to_string(&c.profile).unwrap();
    let stock = "[workers]\ncount = 2\nflavor = \"m1.small\"\nimage = \"hvd-node-bookworm\"\n";
    assert!(text.contains(stock), "{text}");
    let text = text.replace(
        stock,
        &format!("[workers]\ncount = 2\nflavor = \"m1.small\"\nimage = \"{name}\"\n"),
    );
    std::fs::write(&c.profile, text).unwrap();
    // `plan` says so before anything boots from it.
    let plan = c.hvd(&["plan", &c.profile]);
    let shown = String::from_utf8_lossy(&plan.stdout).into_owned();
    assert!(matches!(plan.status.code(), Some(0 | 10)), "{shown}");
    let short = image_id.trim().get(..19).unwrap_or("?").to_string();
    assert!(
        shown.contains(&format!(
            "workers: boot from the bake `{name}`: Docker and the Horovod image {short} on its \
             root disk"
        )),
        "{shown}"
    );
    Baked { name, host_key }
}

/// A preemption, on the same cluster with autostop on again (long enough never to fire here):
/// the cloud deletes a worker's server (as its admin would) during an elastic run; the job
/// shrinks, `heal` replaces the worker (and, the servers having changed, gives the autostop
/// agent a new credential, the old one deleted), the job grows back.
/// The replacement boots from the bake (Docker and the image there, nothing sent to it, a host
/// key of its own); a bake is refused while the job runs, and from a node with staged data;
/// `bake --list` names worker-3 as booted from the bake, whose deletion is refused meanwhile.
fn heal_replaces_a_worker_deleted_by_the_cloud_during_an_elastic_run(
    c: &TestCluster,
    baked: &Baked,
) {
    with_autostop(c, "10m");
    // The same `up` copies a dataset from the cloud's object store.
    let dataset = dataset_in_the_object_store(c);
    let up = c.hvd_ok(&["up", &c.profile]);
    the_dataset_came_from_the_object_store(c, &dataset, &String::from_utf8_lossy(&up.stderr));
    hostile_objects_are_refused_by_name_and_no_link_is_followed(c);
    let rt = runtime();
    let os = rt.block_on(client("local-user"));
    let credentials = || -> Vec<u32> {
        rt.block_on(hvd_cluster::provider::openstack::credential::existing(
            &os, &c.name,
        ))
        .unwrap()
        .into_iter()
        .map(|(g, _)| g)
        .collect()
    };
    let before = credentials();
    assert_eq!(before.len(), 1, "one credential for the agent: {before:?}");
    let mut job = ElasticJob::start(c, 3);
    job.wait_size(2, Duration::from_secs(300));
    // A bake would take a node's containers from under the job: refused, nothing touched.
    let line = common::one_error_line(&c.hvd(&["bake", &c.profile]), 2);
    assert!(
        line.contains("bake: job ") && line.contains(" is running on the cluster"),
        "{line}"
    );

    let victim = format!("{}-worker-1", c.name);
    let id = server_id(c, &victim);
    let admin = rt.block_on(client("local-admin"));
    rt.block_on(admin.compute().delete_server(&id))
        .expect("admin deletes the worker's server");
    job.wait_size(1, Duration::from_secs(180));

    let heal = c.hvd_ok(&["heal", &c.profile]);
    let healed = String::from_utf8_lossy(&heal.stdout);
    assert!(healed.contains(&victim), "{healed}");
    let said = String::from_utf8_lossy(&heal.stderr);
    let renewed = before[0] + 1;
    assert!(
        said.contains(&format!(
            "credential hvd-cluster-{}-autostop-{renewed}",
            c.name
        )),
        "a new server, a new credential: {said}"
    );
    assert_eq!(credentials(), [renewed], "the old credential is deleted");
    // The new worker booted from the bake: Docker and the image were there, nothing sent to
    // it; it made its own host key.
    let new_worker = format!("{}-worker-3", c.name);
    assert!(
        said.contains(&format!(
            "{new_worker}: booted from the bake {}: Docker and the image already here",
            baked.name
        )),
        "{said}"
    );
    assert!(!said.contains(&format!("-> {new_worker}")), "{said}");
    assert_ne!(
        c.on_node("worker-3", &["cat /etc/ssh/ssh_host_ed25519_key.pub"]),
        baked.host_key,
        "a server booted from the bake makes its own host key"
    );
    job.wait_size(2, Duration::from_secs(300));
    assert_eq!(
        c.listed_in_discovery(),
        [2, 3].map(|i| format!("{}-worker-{i}", c.name))
    );
    let sizes = job.stop_and_verify(c);
    assert!(sizes.contains(&1) && sizes.contains(&2), "{sizes:?}");
    // heal's converge found the dataset on /shared (nothing fetched again) and staged it on
    // the new worker (worker-3: heal makes a new name) before it joined
    assert!(
        said.contains("object store: ")
            && said.contains(" 0 file(s), ")
            && said.contains("already there)"),
        "{said}"
    );
    assert_eq!(
        hashes_on(c, "worker-3", STAGED_DATASET),
        dataset.hashes,
        "the new worker got the staged dataset"
    );
    // Staged data is on the node's own disk: it would go into a bake. Refused before anything
    // is set aside; the node keeps its container. (A name of its own: worker-2 booted from the
    // stock image while the profile's workers now name the bake, so its bake is another one,
    // and the bake's name is taken.)
    let other = format!("{}-bake-2", c.name);
    let line = common::one_error_line(
        &c.hvd(&["bake", &c.profile, "--node", "worker-2", "--name", &other]),
        2,
    );
    assert!(
        line.contains("staged data is on this node's root disk")
            && line.contains(&format!("{}-worker-2", c.name)),
        "{line}"
    );
    assert!(
        c.on_node("worker-2", &["sudo docker ps --format '{{.Names}}'"])
            .contains("hvd"),
        "the refused bake left worker-2's container running"
    );
    // `--list` says the profile's workers and worker-3 boot from the bake, which cannot be
    // deleted while they do.
    let list = c.hvd(&["bake", &c.profile, "--list"]);
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let line = listed
        .lines()
        .find(|l| l.starts_with(&format!("{} (", baked.name)))
        .unwrap_or_else(|| panic!("the bake listed: {listed}"));
    assert!(
        line.contains(&format!("from {}-worker-1", c.name))
            && line.contains("this profile's workers boot from it")
            && line.ends_with(&format!("servers from it: {new_worker}")),
        "{line}"
    );
    let line = common::one_error_line(
        &c.hvd(&["bake", &c.profile, "--delete", &baked.name, "--yes"]),
        2,
    );
    assert!(
        line.contains(&format!("is the image of {new_worker}")) && line.contains("nothing deleted"),
        "{line}"
    );
}

/// Objects whose names would climb out of the destination or hold a line break, and a link
/// planted where a folder of the dataset goes: each `up` is refused (exit 2) in one line
/// naming the object or the link, escaped, and nothing lands outside.
fn hostile_objects_are_refused_by_name_and_no_link_is_followed(c: &TestCluster) {
    let container = format!("{}-data", c.name);
    common::cloud::object_store_put(&container, "evil/a/../../../outside", b"x");
    common::cloud::object_store_put(&container, "lf/a\nb", b"x");
    c.on_node(
        "master",
        // one word: `ssh` hands the remote shell its words joined, as ssh does
        &["mkdir -p /tmp/outside /shared/linked && ln -sfn /tmp/outside /shared/linked/a"],
    );
    let clean = std::fs::read_to_string(&c.profile).unwrap();
    for (entry, says) in [
        (
            format!("object_store = \"{container}/evil\""),
            "object evil/a/../../../outside: `..` cannot be a folder or file name",
        ),
        (
            format!("object_store = \"{container}/lf\""),
            "object lf/a\\nb: its name holds a control character",
        ),
        (
            format!("object_store = \"{container}/sets/tiny\"\nshared = \"/shared/linked\""),
            "`a` on the way is not a folder",
        ),
    ] {
        std::fs::write(&c.profile, format!("{clean}\n[[data]]\n{entry}\n")).unwrap();
        let up = c.hvd(&["up", &c.profile]);
        let err = String::from_utf8_lossy(&up.stderr);
        assert_eq!(up.status.code(), Some(2), "{entry}: {err}");
        let line = err
            .lines()
            .find(|l| l.starts_with("error: ") && l.contains("object store: "))
            .unwrap_or_else(|| panic!("{entry}: no refusal in {err}"));
        assert!(line.contains(says), "{entry}: {line}");
    }
    std::fs::write(&c.profile, clean).unwrap();
    assert_eq!(
        c.on_node("master", &["ls -A /tmp/outside | wc -l"]).trim(),
        "0",
        "nothing written through the link"
    );
    c.on_node(
        "master",
        &["sudo", "rm", "-rf", "/shared/linked", "/tmp/outside"],
    );
}

/// Where the dataset lands: on /shared, and staged on every node's own disk.
const SHARED_DATASET: &str = "/shared/tiny";
const STAGED_DATASET: &str = "/var/lib/hvd-cluster/data/staged/tiny";

/// A dataset of the test's own in demo's object store: names with a space, UTF-8, a deep
/// folder, an empty file and a large one.
struct Dataset {
    _dir: tempfile::TempDir,
    hashes: String,
}

/// `sha256sum` of every file below `dir`, by path, as `hashes_on` prints it on a node.
fn hashes_here(dir: &std::path::Path) -> String {
    let out = Command::new("sh")
        .current_dir(dir)
        .args([
            "-c",
            "find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn hashes_on(c: &TestCluster, node: &str, dir: &str) -> String {
    c.on_node(
        node,
        &[&format!(
            "sudo sh -c 'cd {dir} && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum'"
        )],
    )
}

/// Adds the dataset to the profile as `[[data]] object_store = "<container>/sets/tiny"`
/// staged on every node.
fn dataset_in_the_object_store(c: &TestCluster) -> Dataset {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("a/b/c")).unwrap();
    std::fs::write(root.join("a/b/c/deep.txt"), b"deep\n").unwrap();
    std::fs::write(root.join("a/two words.txt"), b"two words\n").unwrap();
    std::fs::write(root.join("\u{fc}ber.txt"), "\u{fc}\n").unwrap();
    std::fs::write(root.join("empty"), b"").unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("a/big.bin"), big).unwrap();
    for i in 0..40 {
        std::fs::write(
            root.join(format!("a/f{i}.txt")),
            format!("{i}\n").repeat(i + 1),
        )
        .unwrap();
    }
    let container = format!("{}-data", c.name);
    common::cloud::object_store_upload(&container, root, "sets/tiny");
    let text = std::fs::read_to_string(&c.profile).unwrap();
    std::fs::write(
        &c.profile,
        format!("{text}\n[[data]]\nobject_store = \"{container}/sets/tiny\"\nstage = true\n"),
    )
    .unwrap();
    Dataset {
        hashes: hashes_here(root),
        _dir: dir,
    }
}

/// The master copied every object into /shared with its content, every node has the staged
/// copy, and the credential the master holds can read the dataset's container and nothing
/// else: no write, no delete, no other container.
fn the_dataset_came_from_the_object_store(c: &TestCluster, dataset: &Dataset, said: &str) {
    assert!(
        said.contains(&format!(
            "data: the master reads the object store with credential hvd-cluster-{}-data-1",
            c.name
        )),
        "{said}"
    );
    assert!(
        said.contains("object store: ") && said.contains(" 45 file(s), "),
        "{said}"
    );
    assert_eq!(hashes_on(c, "master", SHARED_DATASET), dataset.hashes);
    for node in ["master", "worker-1", "worker-2"] {
        assert_eq!(
            hashes_on(c, node, STAGED_DATASET),
            dataset.hashes,
            "staged on {node}"
        );
    }

    let path = format!(
        "{}/credential.json",
        hvd_cluster::transfer::objects::CREDENTIAL_DIR
    );
    let file: serde_json::Value =
        serde_json::from_str(&c.on_node("master", &["sudo", "cat", &path])).unwrap();
    let user = CloudConfig::load(Some("local-user")).unwrap();
    let credential = MadeCredential {
        id: file["credential_id"].as_str().unwrap().into(),
        name: "the master's data credential".into(),
        generation: 1,
        secret: Secret::new(file["credential_secret"].as_str().unwrap()),
        rules: Vec::new(),
    };
    let rt = runtime();
    let os = rt
        .block_on(OpenStack::connect(&credential.cloud(&user)))
        .expect("the master's credential authenticates");
    let container = format!("{}-data", c.name);
    let list = Request::get(Service::ObjectStore, container.as_str()).query("format", "json");
    assert!(
        rt.block_on(os.request(&list)).is_ok(),
        "it lists its container"
    );
    for (what, request) in [
        (
            "write",
            Request::put(
                Service::ObjectStore,
                format!("{container}/evil"),
                serde_json::json!("x"),
            ),
        ),
        (
            "delete",
            Request::delete(Service::ObjectStore, format!("{container}/sets/tiny/empty")),
        ),
        ("list the account", Request::get(Service::ObjectStore, "")),
        (
            "read another container",
            Request::get(Service::ObjectStore, "another"),
        ),
    ] {
        let e = rt.block_on(os.request(&request)).expect_err(what);
        assert!(matches!(e.status(), Some(401 | 403)), "{what}: {e}");
    }
}

/// The cluster came up with `autostop = "10m"`: the agent is there with a credential limited
/// to the cluster's servers. `up` with `"off"` changes no resource and removes agent and
/// credential; `"60s"` puts them back. A job longer than the idle time keeps the cluster up
/// (the agent logs it busy, `status` shows it); once the job ends the agent stops the
/// cluster itself (workers first, then the master), its log naming the reason. The caller's
/// `down` then deletes the stopped cluster and its credentials.
fn autostop_keeps_it_up_while_busy_and_stops_it_when_idle(c: &TestCluster, first_up: &str) {
    let rt = runtime();
    let os = rt.block_on(client("local-user"));
    let credentials = || {
        rt.block_on(hvd_cluster::provider::openstack::credential::existing(
            &os, &c.name,
        ))
        .unwrap()
        .len()
    };
    let installed = |said: &str, idle: &str| {
        assert!(
            said.contains(&format!(
                "autostop: the master stops the cluster after {idle} idle"
            )) && said.contains("limited to this cluster's servers"),
            "{said}"
        );
        assert_eq!(credentials(), 1);
    };
    installed(first_up, "10m");
    assert!(
        c.status_json()["autostop"]
            .as_str()
            .is_some_and(|s| s.ends_with("stops after 600s idle")),
        "status shows the agent's word"
    );
    with_autostop(c, "off");
    let off = c.hvd_ok(&["up", &c.profile]);
    let said = String::from_utf8_lossy(&off.stderr);
    assert!(
        said.contains("nothing to change"),
        "a second up finds every resource"
    );
    assert!(said.contains("autostop: off; the agent and its credential are gone"));
    assert_eq!(credentials(), 0);
    assert_eq!(c.status_json()["autostop"], "off", "the agent's last word");
    assert!(
        !c.on_node("master", &["sudo", "ls", "/var/lib/hvd-cluster"])
            .contains("autostop"),
        "the agent's folder is gone"
    );
    with_autostop(c, "60s");
    let on = c.hvd_ok(&["up", &c.profile]);
    installed(&String::from_utf8_lossy(&on.stderr), "60s");

    let master = MasterFiles::new(c);
    let agent_log = || master.read(hvd_cluster::autostop::AGENT_LOG);
    let states = || server_states(&os, &rt, &c.name);

    // A job that outlasts the idle time keeps the cluster up. Detached: the command that
    // submitted it is gone at once, the job runs on the master without it.
    // It also leaves a file on /shared, which must outlive the stop.
    let submitted = c.hvd(&[
        "run",
        &c.profile,
        "--detach",
        "--",
        "sh",
        "-c",
        "echo kept > /shared/kept.txt && sleep 80",
    ]);
    assert!(submitted.status.success(), "{submitted:?}");
    let id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .to_string();
    assert!(
        id.parse::<u32>().is_ok(),
        "run --detach prints the job's number: {id}"
    );
    std::thread::sleep(Duration::from_secs(70));
    let log = agent_log().expect("the agent's log");
    assert!(
        log.contains("started: stops the cluster after 60s idle"),
        "{log}"
    );
    assert!(log.contains("busy: job running: horovodrun"), "{log}");
    assert!(!log.contains("stopping the cluster"), "{log}");
    let now = states();
    assert!(now.iter().all(|s| s == "Active/None"), "{now:?}");
    let said = c.status_json()["autostop"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        said.starts_with("busy: job running: horovodrun") && said.ends_with("stops after 60s idle"),
        "status shows what the agent decided: {said}"
    );
    // Read back from another command: followed to its end, with its exit status.
    let followed = c.hvd(&["logs", &c.profile, &id, "--follow"]);
    assert!(followed.status.success(), "the job finishes: {followed:?}");
    let record = common::jobs::job(c, id.parse().unwrap_or(0));
    assert_eq!(record["state"], "succeeded", "{record}");

    // Idle: the agent stops the cluster by itself.
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last_log = log;
    loop {
        if let Some(log) = agent_log() {
            last_log = log;
        }
        let now = states();
        if now.iter().all(|s| s == "ShelvedOffloaded/None") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not stopped: {now:?}\n{last_log}"
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    eprintln!("the agent's last log seen:\n{last_log}");
    assert!(last_log.contains("idle for"), "{last_log}");
    assert!(last_log.contains("stopping the cluster"), "{last_log}");
    let status = c.status_json();
    assert_eq!(status["state"], "stopped");
    assert!(
        status["autostop"]
            .as_str()
            .is_some_and(|s| s.starts_with("stopping: idle for")),
        "{status:#}"
    );
}

/// The space check: a master on `m1.tiny`, whose 1 GB root disk the test cloud's
/// compute driver makes the node's real room for Docker (a tmpfs of that size): `up` refuses
/// before a byte of the image is sent, in one line naming the node, the free and needed
/// gigabytes and the profile key that gives it room; the node holds no image and no archive.
/// Then the same image pulled from a registry: refused from the sizes in the registry's
/// manifest, before the registry sends a layer; then built on the master: refused before the
/// build starts.
#[test]
fn an_image_without_room_on_the_node_is_refused_before_a_byte_is_sent() {
    require_cloud();
    require_node_image();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = TestCluster::new("local-cloud-hosts.toml", "t-room", |p| {
        p.replace("flavor = \"m1.medium\"", "flavor = \"m1.tiny\"")
            .replace("count = 2", "count = 0")
            .replace("kind = \"master-nfs\"", "kind = \"none\"")
    });
    let master = format!("{}-master", c.name);
    let before = cloud_containers();
    let result = std::panic::catch_unwind(|| {
        let up = c.hvd(&["up", &c.profile]);
        let line = refusal_line(&up, &master);
        assert!(line.contains("GB free where Docker keeps images"), "{line}");
        assert!(
            line.contains("hvd-cluster/horovod:tf2.12.1-hvd0.28.1 needs"),
            "{line}"
        );
        assert!(
            line.contains("give it room with [master] root_volume_gb = "),
            "{line}"
        );
        let free: f64 = line
            .split(": ")
            .nth(1)
            .and_then(|r| r.split(" GB free").next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(free <= 1.1, "the tiny flavor's room: {line}");
        // Nothing reached the node: no archive in /var/tmp, no image in its Docker.
        let files = c.on_node(
            "master",
            // one word: `ssh` hands the remote shell its words joined, as ssh does
            &["ls /var/tmp | grep hvd-cluster-image || true"],
        );
        assert_eq!(files.trim(), "", "no archive on the node");
        let images = c.on_node("master", &["sudo", "docker", "images", "-q"]);
        assert_eq!(images.trim(), "", "no image on the node");

        // The same image pulled from a registry (Debian's docker-registry over TLS with basic
        // auth, tests/registry/start): the master reads the image's size from the registry's
        // manifest and refuses before a layer is pulled.
        let registry = Registry::start_with_only(&[OUR_IMAGE]);
        let pulled = format!(
            "hvd-test/{}",
            OUR_IMAGE.rsplit('/').next().unwrap_or(OUR_IMAGE)
        );
        let image = registry.image(&pulled);
        let ca = registry.state.join("ca.crt");
        let original = std::fs::read_to_string(&c.profile).expect("the test's profile");
        let profile = original
            .replace(
                &format!("image = \"{OUR_IMAGE}\""),
                &format!("image = \"{image}\"\nregistry_ca = \"{}\"", ca.display()),
            )
            .replace("source = \"build\"", "source = \"pull\"");
        assert!(profile.contains("source = \"pull\""), "{profile}");
        std::fs::write(&c.profile, profile).expect("write the test's profile");
        let pulled_before = registry.blob_bytes_sent(&pulled);
        let up = c
            .command(&["up", &c.profile])
            .env("DOCKER_CONFIG", registry.state.join("docker"))
            .output()
            .expect("run up");
        let said = String::from_utf8_lossy(&up.stderr);
        eprintln!(
            "$ hvd-cluster up (pull)\n--- exit {:?}\n{said}",
            up.status.code()
        );
        let line = refusal_line(&up, &master);
        assert!(
            !said.contains(&registry.password),
            "no password in any output"
        );
        assert!(line.contains(&format!("{image} needs")), "{line}");
        assert!(
            line.contains("of layers in the registry, about") && line.contains("unpacked, pulled)"),
            "{line}"
        );
        assert!(
            line.contains("give it room with [master] root_volume_gb = "),
            "{line}"
        );
        // `docker manifest inspect --verbose` reads the image's config blob (its platform):
        // a few kilobytes; a layer of this image is hundreds of megabytes.
        let sent = registry.blob_bytes_sent(&pulled) - pulled_before;
        assert!(
            sent < 100_000,
            "the registry sent the image's config and no layer: {sent} bytes"
        );
        let images = c.on_node("master", &["sudo", "docker", "images", "-q"]);
        assert_eq!(images.trim(), "", "no image on the node");

        // Built on the master (`build-remote`): refused before the recipe is unpacked, with
        // the measured need of a build from nothing.
        let profile = original.replace("source = \"build\"", "source = \"build-remote\"");
        assert!(profile.contains("source = \"build-remote\""), "{profile}");
        std::fs::write(&c.profile, profile).expect("write the test's profile");
        let up = c.hvd(&["up", &c.profile]);
        let line = refusal_line(&up, &master);
        assert!(
            line.contains(&format!(
                "{OUR_IMAGE} needs 9.0 GB there (built on the master from nothing: the base's tree, the build stage and the image)"
            )),
            "{line}"
        );
        assert!(
            line.contains("give it room with [master] root_volume_gb = "),
            "{line}"
        );
        let recipe = c.on_node(
            "master",
            &["ls -d /var/tmp/hvd-cluster-recipe* 2>/dev/null || true"],
        );
        assert_eq!(recipe.trim(), "", "no recipe unpacked, no build started");
        let images = c.on_node("master", &["sudo", "docker", "images", "-q"]);
        assert_eq!(images.trim(), "", "no image on the node");
    });
    let bakes = down_leaves_nothing(&c, &before, result);
    assert!(bakes.is_empty(), "{bakes:?}");
}

/// The line of `up`'s refusal for lack of room that names `node`; `up` failed.
fn refusal_line(up: &std::process::Output, node: &str) -> String {
    let said = String::from_utf8_lossy(&up.stderr);
    assert!(!up.status.success(), "{said}");
    assert!(
        said.contains("not enough room for the image; nothing was sent"),
        "{said}"
    );
    said.lines()
        .find(|l| l.starts_with(&format!("{node}: ")) && l.contains("free where Docker"))
        .unwrap_or_else(|| panic!("no line for {node}: {said}"))
        .to_string()
}
