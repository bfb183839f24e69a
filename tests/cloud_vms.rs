//! The whole job on real virtual machines: `up` with profiles/local-cloud-vms.toml
//! against the local OpenStack cloud's VM host, whose servers of `debian-12-generic` (a stock
//! Debian 12 cloud image: nothing of ours inside) are libvirt guests under qemu TCG on Linux
//! bridges, with routers, SNAT, floating IPs and security groups enforced in nftables.
//!
//! The containers run our image (`container.source = "build"`: sent from this machine to the
//! master, which passes its copy on to the worker). With `HVD_TEST_VMS_PULL=1` they run a
//! user's own image instead, a run by hand, not in scripts/test for CI's time (21
//! minutes alone): the stand-in for the public horovod/horovod images (nothing of
//! ours inside, no sshd running, no Jupyter), pulled by the master from a private registry over
//! TLS with basic auth (tests/registry/start, Debian's docker-registry on this machine, which
//! the guests reach through their router), by `scale`'s worker through the master's mirror,
//! the tool supplying the runtime from outside the image.
//!
//! The guests one after the other: the master's (one slot, its worker left out by the test's
//! profile) through `up` and the stages below, then a worker's by `scale --workers 1`. An emulated
//! guest costs minutes of both cores, and two busy at once cost each about what one starved guest
//! costs (docs/notes/guests.md), which put the suite past CI's time on slower machines. The one
//! cluster carries every assertion: one qemu process per server; with the user's image, the image
//! pulled once from the registry and no password in any output; SSH to the master by its floating
//! IP; /shared the master's kernel NFS export; the check on its one slot (a master's `slots = 2`
//! is proven on cloud_hosts' second cluster: each slot is one more TensorFlow import under
//! emulation at every check); the Jupyter URL answering through `hvd-cluster jupyter`'s tunnel;
//! the security groups proven from outside (the master's SSH answers from 203.0.113.5, inside
//! `allowed_cidrs`, and not from 203.0.113.6; the containers' SSH port 12345, listening, does not
//! answer from 203.0.113.5; Jupyter's port closed on the floating IP); the GPU runtime step short
//! of a GPU. Then `bake` of the master: Nova's libvirt driver snapshots the running
//! guest live, the master is set back and checked again, and the image's file is read on this
//! machine (no file holds the cluster's keys or the master's host key). Then the worker joins with
//! autostop on: it boots from a 12 GB Ceph volume made from that bake on a flavor with no root
//! disk and Docker on its ephemeral disk, finds Docker and the image there (no apt transaction,
//! nothing sent: the bake's Docker data copied onto the ephemeral disk; with HVD_TEST_VMS_PULL=1
//! it boots from the stock image and pulls through the master's mirror), has a host key and
//! machine id of its own and nothing of the master's /shared, mounts /shared from the master with
//! the kernel client (kept in fstab), is reached through the master, its SSH and Horovod port open
//! inside the group and not from outside it, the check across both guests; a job started at once
//! keeps the cluster busy through those checks. Released, it ends, and the agent on the master
//! stops the idle cluster by itself (both guests shelved and offloaded, the worker first, each
//! shelve timed). With `HVD_TEST_VMS_START=1` (by hand, for CI's time) `start` then brings both
//! back (the master's disk kept its image; the worker's blank ephemeral disk is made Docker's
//! again and gets the bake's Docker data from its root disk again); without it `down` deletes the
//! stopped cluster but /shared's Ceph volume, kept (`storage.keep`): read on this machine after
//! `down` (its Ceph image exported, the ext4 read with debugfs) it holds the file written to
//! /shared before the stop; the test then deletes it. `down` leaves no other server, volume, port,
//! floating IP, security group, network, share, qemu process, bridge, tap, Ceph image or nftables
//! rule, and leaves the bake, which `bake --delete` removes. (`stop` by hand is proven against the
//! same cloud in tests/cloud_cli.rs: the same Nova calls, no emulated guest.)
//!
//! Needs the cloud with its VM host (`tests/cloud/install && tests/cloud/start`, libvirt
//! installed), our image (scripts/build-images) or with HVD_TEST_VMS_PULL=1 the stand-ins
//! (tests/registry/start builds them when missing), root (network namespaces for
//! tests/cloud/public-source, virsh).
//!
//! The slowest test of the suite (see docs/notes/suite-time.md and docs/notes/guests.md for
//! where its time goes); it stands in for tests/cloud/smoke-vm in CI, which proves the VM
//! host alone.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cloud::{
    clouds_yaml, leftovers, require_cloud, runtime, server_states, with_autostop, MasterFiles,
};
use common::registry::{Registry, OUR_IMAGE, STAND_IN};
use common::{http_get, TestCluster};
use hvd_cluster::openstack::Query;

const ALLOWED_SOURCE: &str = "203.0.113.5";
const OUTSIDE_SOURCE: &str = "203.0.113.6";

/// The cloud's own directory (tests/cloud of the tree that started it): its state, its tools.
fn cloud_dir() -> PathBuf {
    let yaml = clouds_yaml();
    yaml.parent()
        .and_then(|state| state.parent())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("tests/cloud"))
}

/// The cloud runs its VM host (nova-compute with the libvirt driver) and has the image.
fn require_vm_host() {
    let services = cloud_dir().join("state/services");
    let listed = std::fs::read_to_string(&services).unwrap_or_default();
    assert!(
        listed.split_whitespace().any(|s| s == "nova-compute-vm"),
        "the local cloud runs no VM host ({} lists no nova-compute-vm): install libvirt \
         (tests/cloud/install) and restart the cloud with ENABLE_VM=1",
        services.display()
    );
    let virsh = Command::new("virsh")
        .args(["-c", "qemu:///system", "version"])
        .output();
    assert!(
        virsh.is_ok_and(|o| o.status.success()),
        "libvirtd does not answer (virsh -c qemu:///system version): the VM host is down"
    );
}

/// `HVD_TEST_VMS_PULL=1`: the guests run a user's image pulled from the registry, not ours.
fn pulls_a_users_image() -> bool {
    std::env::var("HVD_TEST_VMS_PULL").is_ok_and(|v| v == "1")
}

/// `start` of both guests after the agent's stop (the master from its snapshot, the worker's
/// blank ephemeral disk made Docker's again and the image sent to it again): 12 to 25 minutes
/// of emulated guests, so by hand with `HVD_TEST_VMS_START=1` (scripts/test leaves it out for
/// CI's time; docs/guide/testing.md). Without it `down` deletes
/// the stopped cluster, shelve snapshot and volumes included.
fn starts_again() -> bool {
    std::env::var("HVD_TEST_VMS_START").is_ok_and(|v| v == "1")
}

fn require_horovod_image() {
    let built = Command::new("docker")
        .args(["image", "inspect", OUR_IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        built,
        "{OUR_IMAGE} is not built here: run scripts/build-images"
    );
}

/// With HVD_TEST_VMS_PULL=1, the image the guests run: the stand-in for the public horovod/horovod images
/// (tests/registry/standins: Debian's PyTorch and Horovod from PyPI, openssh-server installed
/// but not running, a shell as its command, nothing of ours inside), pushed to the private
/// registry under a repository of its own, so that the registry's byte count for it is this
/// test's alone while the other tests pull their stand-ins from the same registry.
const GUEST_IMAGE: &str = "hvd-test/guests-like-horovod-horovod:1";

/// The registry of tests/registry/start (TLS with a CA of its own, basic auth) with the
/// guests' image pushed. The guests reach it at this machine's address on its Docker network
/// (198.18.0.1), routed by their router like any address outside the cloud.
fn registry_with_the_guests_image() -> Registry {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = Command::new(root.join("tests/registry/standins/build"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(built, "tests/registry/standins/build failed");
    let tagged = Command::new("docker")
        .args(["tag", STAND_IN, GUEST_IMAGE])
        .status()
        .is_ok_and(|s| s.success());
    assert!(tagged, "docker tag {STAND_IN} {GUEST_IMAGE}");
    Registry::start_pushing(&[GUEST_IMAGE])
}

/// True when a TCP connection to ADDR:PORT opens within 5 s, from this machine or, with
/// `source`, from that address on the external network (tests/cloud/public-source).
fn tcp_opens(source: Option<&str>, addr: &str, port: u16) -> bool {
    let probe = format!("exec 3<>/dev/tcp/{addr}/{port}");
    let mut cmd = match source {
        Some(src) => {
            let mut c = Command::new(cloud_dir().join("public-source"));
            c.args([src, "timeout", "5", "bash", "-c", &probe]);
            c
        }
        None => {
            let mut c = Command::new("timeout");
            c.args(["5", "bash", "-c", &probe]);
            c
        }
    };
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `tcp_opens`, retried for a while (rules reach nftables asynchronously).
fn eventually_opens(source: Option<&str>, addr: &str, port: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if tcp_opens(source, addr, port) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// A Ceph command (`ceph` or `rbd`) against the test cloud's cluster, as it ended.
fn ceph_output(args: &[&str]) -> std::io::Result<std::process::Output> {
    Command::new(args[0])
        .arg("-c")
        .arg(cloud_dir().join("state/ceph/ceph.conf"))
        .args(&args[1..])
        .output()
}

/// A Ceph command that must succeed; its stdout.
fn ceph(args: &[&str]) -> String {
    let out = ceph_output(args).expect("run a Ceph command");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh(command: &str) -> String {
    let out = Command::new("bash")
        .args(["-c", command])
        .output()
        .expect("run a shell command");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The qemu processes of libvirt guests, as command lines.
fn qemu_processes() -> Vec<String> {
    sh("pgrep -a -f '^[^ ]*qemu-system' || true")
        .lines()
        .map(String::from)
        .collect()
}

/// The `check:` line a command that ends in the check (`up`, `start`, `scale`) printed.
/// `12s` of the "✓ servers ACTIVE after 12s" line of `up` or `scale`, or "?".
fn active_after(said: &str) -> &str {
    said.lines()
        .find_map(|l| l.split("servers ACTIVE after ").nth(1))
        .map_or("?", str::trim)
}

fn check_line<'a>(out: &'a str, command: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with("check:"))
        .unwrap_or_else(|| panic!("{command} prints the check"))
}

/// The `Host NAME` block of the cluster's ssh config.
fn host_block<'a>(config: &'a str, name: &str) -> &'a str {
    config
        .split("Host ")
        .find(|b| b.starts_with(&format!("{name}\n")) || b.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no Host {name} in:\n{config}"))
}

/// What the cloud's data plane holds for the cluster, named by the ids Neutron and Nova
/// gave it: qemu processes, libvirt domains, the network's bridge, the ports' taps and
/// nftables rules naming them.
struct DataPlane {
    server_ids: Vec<String>,
    network_id: String,
    port_ids: Vec<String>,
    /// The servers' volumes (the worker boots from one in Ceph).
    volume_ids: Vec<String>,
}

impl DataPlane {
    fn of(c: &TestCluster) -> DataPlane {
        let status = c.status_json();
        let ids = |kind: &str| -> Vec<String> {
            status["resources"]
                .as_array()
                .expect("status lists resources")
                .iter()
                .filter(|r| r["kind"] == kind)
                .filter_map(|r| r["id"].as_str().map(String::from))
                .collect()
        };
        let server_ids = ids("server");
        let network_id = ids("network").into_iter().next().expect("a network");
        // Every port on the network: the servers', the router's, DHCP's.
        let rt = runtime();
        let os = rt.block_on(common::cloud::client("local-user"));
        let ports = rt
            .block_on(
                os.network()
                    .list_ports(&Query::new().eq("network_id", &network_id)),
            )
            .expect("list the network's ports");
        let mut volume_ids = Vec::new();
        for id in &server_ids {
            if let Some(server) = rt
                .block_on(os.compute().get_server(id))
                .expect("get a server")
            {
                volume_ids.extend(server.volumes_attached.into_iter().map(|v| v.id));
            }
        }
        DataPlane {
            server_ids,
            network_id,
            port_ids: ports.into_iter().map(|p| p.id).collect(),
            volume_ids,
        }
    }

    /// Every trace of the cluster still on this machine.
    fn traces(&self) -> Vec<String> {
        let mut left = Vec::new();
        let qemu = qemu_processes();
        for id in &self.server_ids {
            let domain = sh(&format!(
                "virsh -c qemu:///system domname {id} 2>/dev/null || true"
            ));
            let domain = domain.trim();
            if !domain.is_empty() {
                left.push(format!("libvirt domain {domain} (server {id})"));
                let guest = format!("guest={domain},");
                if qemu.iter().any(|p| p.contains(&guest) || p.contains(id)) {
                    left.push(format!("qemu process of {domain}"));
                }
            } else if qemu.iter().any(|p| p.contains(id.as_str())) {
                left.push(format!("qemu process of server {id}"));
            }
        }
        let links = sh("ip -o link show");
        let bridge = format!("brq{}", &self.network_id[..11.min(self.network_id.len())]);
        if links.contains(&format!(": {bridge}")) {
            left.push(format!("bridge {bridge}"));
        }
        let rules = sh("nft list ruleset 2>/dev/null");
        for port in &self.port_ids {
            let tap = format!("tap{}", &port[..11.min(port.len())]);
            if links.contains(&format!(": {tap}")) {
                left.push(format!("tap {tap}"));
            }
            if rules.contains(&tap) || rules.contains(&port[..11.min(port.len())]) {
                left.push(format!("nftables rule for port {port}"));
            }
        }
        if rules.contains(&bridge) {
            left.push(format!("nftables rule for bridge {bridge}"));
        }
        if !self.volume_ids.is_empty() {
            let images = ceph(&["rbd", "ls", "volumes"]);
            for id in &self.volume_ids {
                if images.contains(id.as_str()) {
                    left.push(format!("Ceph image of volume {id}"));
                }
            }
        }
        left
    }
}

/// After `down`: /shared's volume, kept (storage.keep), read on this machine without a guest
/// (its Ceph image exported, the ext4 in it read with debugfs): (its name, what
/// `/before-stop.txt` holds). Then deleted, as a user would once done with it, and waited for
/// until Cinder and Ceph have let it go. `None` when there is none (a failed `up`).
fn the_kept_volume_holds_the_file(
    c: &TestCluster,
    os: &hvd_cluster::openstack::OpenStack,
    rt: &tokio::runtime::Runtime,
) -> Option<(String, String)> {
    let name = format!("{}-shared-volume", c.name);
    let volumes = rt
        .block_on(
            os.volume()
                .list_volumes(&std::collections::BTreeMap::from([(
                    "hvd-cluster".to_string(),
                    c.name.clone(),
                )])),
        )
        .expect("list the cluster's volumes");
    let volume = volumes
        .into_iter()
        .find(|v| v.name.as_deref() == Some(name.as_str()))?;
    // Nothing here may panic: after a failed test the volume must still go, and the first
    // failure be the one shown. What went wrong is in the text, which the caller checks.
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("shared.img");
    let export = ceph_output(&[
        "rbd",
        "export",
        &format!("volumes/volume-{}", volume.id),
        &image.to_string_lossy(),
    ]);
    let text = match export {
        Ok(o) if o.status.success() => Command::new("debugfs")
            .args(["-R", "cat /before-stop.txt"])
            .arg(&image)
            .output()
            .map(|r| String::from_utf8_lossy(&r.stdout).into_owned())
            .unwrap_or_else(|e| format!("debugfs: {e}")),
        Ok(o) => format!("rbd export: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => format!("rbd export: {e}"),
    };
    if let Err(e) = rt.block_on(os.volume().delete_volume(&volume.id)) {
        eprintln!("could not delete the kept volume {}: {e}", volume.id);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while rt
        .block_on(os.volume().get_volume(&volume.id))
        .is_ok_and(|v| v.is_some())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_secs(2));
    }
    Some((name, text))
}

/// On the master guest, with the rendered GPU runtime script's functions: NVIDIA's repository
/// set up from the stand-in (its key checked), the driver packages the script picks for the
/// guest's release and kernel resolved by apt against Debian's archive with the components
/// enabled (simulated:
/// DKMS would build the module for minutes under emulation, and with no GPU it could not
/// load), the stand-in toolkit installed from the repository apt verified with that keyring,
/// and the line the step says when the module does not load. One `KEY=VALUE` line each; the
/// guest is left as it was but for the enabled components.
const GPU_STAGE: &str = r#"set -u
HVD_GPU_FUNCTIONS_ONLY=1 . /tmp/hvd-gpu-apply.sh
set +e
say() { printf '%s=%s\n' "$1" "$2"; }
hvd_gpu_plan; say plan $?
hvd_gpu_repo 2> /tmp/hvd-gpu-repo.err; say repo "$? $(tr '\n' ' ' < /tmp/hvd-gpu-repo.err)"
say list "$(cat "$HVD_GPU_LIST" 2>/dev/null)"
say keyring "$(GNUPGHOME=$(mktemp -d) gpg --batch --with-colons --show-keys "$HVD_GPU_KEYRING" 2>/dev/null | awk -F: '$1 == "fpr" { printf "%s ", $10 }')"
for f in "${HVD_GPU_SOURCES[@]}"; do hvd_gpu_components "$f" "${HVD_GPU_COMPONENTS[@]}" 2> /dev/null; done
say components "$(cat /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list 2> /dev/null | grep -E '^(Components:|deb )' | tr '\n' ';')"
hvd_gpu_packages 2> /tmp/hvd-gpu-packages.err
[ -e /run/hvd-cluster-apt-updated ]; say update "$? $(tr '\n' ' ' < /tmp/hvd-gpu-packages.err)"
say packages "${HVD_GPU_INSTALL[*]}"
sim=$(apt-get install -s -q --no-install-recommends "${HVD_GPU_INSTALL[@]}" 2>&1); rc=$?
say simulate "$rc $( [ $rc = 0 ] || echo "$sim" | tail -n 5 | tr '\n' ' ')"
say would_install "$(echo "$sim" | awk '$1 == "Inst" { printf "%s ", $2 }')"
hvd_apt_install nvidia-container-toolkit > /dev/null 2>&1; say toolkit $?
say toolkit_version "$(dpkg-query -W -f='${Version}' nvidia-container-toolkit 2>/dev/null)"
loaded=$( (hvd_gpu_loaded) 2>&1 ); say loaded "$? $loaded"
apt-get purge -y -q nvidia-container-toolkit > /dev/null 2>&1
hvd_gpu_unconfigure
"#;

/// `python3 -m http.server` for a folder on one of this machine's addresses, stopped when
/// dropped.
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// This machine on the cloud's external network (the public subnet's gateway), which the
/// guests reach through their router.
const THIS_MACHINE: &str = "203.0.113.1";

/// The GPU runtime step on a stock Debian VM without a GPU: everything short of the GPU
/// itself. The stand-in repository is served on this machine's address on the
/// cloud's external network.
fn gpu_runtime_on_the_master(c: &TestCluster) {
    use base64::Engine;
    use hvd_cluster::bootstrap::steps::gpu::{self, ToolkitRepo, REBOOT_EXIT_CODE, REBOOT_MARKER};

    let fixtures = common::gpu_repo::Fixtures::make();
    let host = THIS_MACHINE;
    let port = std::net::TcpListener::bind((host, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let _served = Served(
        Command::new("python3")
            .args(["-m", "http.server", &port.to_string(), "--bind", host])
            .current_dir(fixtures.served("good"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m http.server"),
    );
    let url = format!("http://{host}:{port}");
    let repo = ToolkitRepo::new(&url, &fixtures.good).expect("the stand-in repository");
    let script = hvd_cluster::render::Renderer::new()
        .expect("renderer")
        .script("gpu.apply.sh", &gpu::values(&repo).expect("values"))
        .expect("the rendered gpu runtime script");
    let encoded = base64::engine::general_purpose::STANDARD.encode(script.as_bytes());
    c.on_node(
        "master",
        &[&format!(
            "echo {encoded} | base64 -d > /tmp/hvd-gpu-apply.sh"
        )],
    );
    let said = c.on_node(
        "master",
        &[
            "sudo",
            "bash",
            "-c",
            &format!("'{}'", GPU_STAGE.replace('\'', "'\\''")),
        ],
    );
    let value = |key: &str| -> String {
        said.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in:\n{said}"))
            .trim()
            .to_string()
    };
    eprintln!("the GPU runtime on the master VM:\n{said}");
    assert_eq!(value("plan"), "0", "{said}");
    assert_eq!(
        value("repo").split_whitespace().next(),
        Some("0"),
        "the key is checked and trusted: {said}"
    );
    assert_eq!(
        value("list"),
        format!(
            "deb [signed-by={}] {url}/stable/deb/$(ARCH) /",
            gpu::KEYRING
        )
    );
    assert_eq!(
        value("keyring"),
        fixtures.good,
        "the keyring holds the good key alone"
    );
    let components = value("components");
    let entries: Vec<&str> = components
        .split(';')
        .filter(|e| e.contains(" main"))
        .collect();
    assert!(
        !entries.is_empty()
            && entries
                .iter()
                .all(|e| e.contains(" main contrib non-free non-free-firmware")),
        "the driver's components enabled on every Debian source: {components}"
    );
    assert_eq!(
        value("update").split_whitespace().next(),
        Some("0"),
        "the package lists read again with the components: {said}"
    );
    assert_eq!(
        value("simulate"),
        "0",
        "apt resolves the driver packages: {said}"
    );
    let would = value("would_install");
    for package in [
        "nvidia-driver",
        "nvidia-kernel-dkms",
        "firmware-misc-nonfree",
    ] {
        assert!(
            would.split_whitespace().any(|p| p == package),
            "{package} among what the driver step installs: {would}"
        );
    }
    assert!(would.contains("linux-headers-"), "{would}");
    assert_eq!(value("toolkit"), "0", "{said}");
    assert_eq!(value("toolkit_version"), "1.0.0-hvdtest");
    let loaded = value("loaded");
    assert!(
        loaded.starts_with(&format!("{REBOOT_EXIT_CODE} {REBOOT_MARKER}"))
            && loaded.contains("does not load in the running kernel"),
        "{loaded}"
    );
}

/// A job that lasts until the test releases it (a file on /shared every rank waits for): it
/// keeps the autostop agent busy while the test proves the worker on the running cluster, so
/// the agent the worker's `scale` installed stops the cluster only once the test lets it.
const HOLD_SCRIPT: &str = "/shared/hold-the-cluster.sh";
const HOLD_RELEASE: &str = "/shared/hold-the-cluster.release";

/// The agent's idle time in this test. Between the end of `scale` (the agent's idle time
/// starts) and the holding job's start, only `run` reaches the master: on a slow machine of
/// our kind under the suite's load a new SSH connection to an emulated guest took up to a
/// minute (the holding script written after `scale` took 58 s, `run` came after the
/// agent's 60 s and it stopped the worker under the test's checks). Hence the script is
/// written before `scale` and the idle time leaves `run` two minutes.
const AUTOSTOP_IDLE: &str = "120s";

/// Writes the holding job's script on /shared, before `scale` starts the agent's idle time.
fn write_hold_script(c: &TestCluster) {
    c.on_node(
        "master",
        &[&format!(
            "printf '%s\\n' '#!/bin/sh' 'while [ ! -e {HOLD_RELEASE} ]; do sleep 2; done' \
             | sudo tee {HOLD_SCRIPT} > /dev/null"
        )],
    );
}

/// Starts the holding job (its script written by `write_hold_script`) with `run` from this
/// machine, as a user starts a job.
fn hold_the_cluster(c: &TestCluster) -> std::process::Child {
    c.command(&["run", &c.profile, "--", "sh", HOLD_SCRIPT])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the holding job")
}

/// Where the worker's image came from: the master's bake (our image), or a user's image pulled
/// through the master's mirror from the registry.
enum WorkerImage<'a> {
    Baked,
    Pulled(&'a Registry),
}

/// Autostop on the VMs, then `start` of both guests. `scale` put the agent on the master (a
/// systemd service of the stock image, calling Keystone and Nova at 203.0.113.1 through the
/// router's SNAT with a credential limited to the cluster's two servers), and the holding job
/// (`hold_the_cluster`, started as soon as `scale` returned) has kept the cluster up through
/// the worker's checks. Released, the job ends; idle, the agent stops the cluster by itself:
/// the worker first, then the master, each one's shelve watched from here (Nova shelves the
/// volume-backed worker with no snapshot and uploads the image-backed master's disk to
/// Glance); their qemu processes gone, Placement holding nothing for them, `status` saying
/// why. `start` (autostop now off) brings both back: the master from its snapshot with its
/// disk (no image sent again), the worker from the same root volume with a blank ephemeral
/// disk (Nova makes it anew at unshelve: the data disk step makes it Docker's again and the
/// bake's Docker data is copied onto it again from the worker's root disk, or with a user's
/// image the image comes again from the master); the check passes across both guests, a file
/// written to /shared before the stop is there on both, the floating IP is the same, and the
/// agent is gone. The caller's `down` then deletes the cluster. Benchmark lines compare the
/// two shelves, and `start` with the first `up` (not asserted).
fn autostop_then_start(
    c: &TestCluster,
    mut job: std::process::Child,
    dp: &DataPlane,
    fip: &str,
    mark: &str,
    up_took: Duration,
    worker_image: WorkerImage<'_>,
) {
    let master = format!("{}-master", c.name);
    let worker = format!("{}-worker-1", c.name);
    let registry = match worker_image {
        WorkerImage::Pulled(r) => Some(r),
        WorkerImage::Baked => None,
    };
    let pulled_before_stop = registry.map(|r| r.blob_bytes_sent(GUEST_IMAGE));
    let files = MasterFiles::new(c);
    let agent_log = || files.read(hvd_cluster::autostop::AGENT_LOG);
    let unit = c.on_node(
        "master",
        &["systemctl", "is-enabled", "hvd-cluster-autostop.service"],
    );
    assert_eq!(unit.trim(), "enabled", "the agent survives a reboot");

    let rt = runtime();
    let os = rt.block_on(common::cloud::client("local-user"));
    // The agent's word reached Nova from the guest (on the master's server) long ago: fail
    // here, not after the long deadline below, when the guests cannot reach the APIs.
    let heard = Instant::now() + Duration::from_secs(300);
    loop {
        let word = c.status_json()["autostop"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if word.contains(&format!("stops after {AUTOSTOP_IDLE} idle"))
            || word.starts_with("stopping")
        {
            break;
        }
        assert!(
            Instant::now() < heard,
            "the agent's word never reached Nova (status says {word:?}); its log:\n{}",
            agent_log().unwrap_or_default()
        );
        std::thread::sleep(Duration::from_secs(5));
    }
    // The job has outlasted the idle time many times over: the cluster is still up.
    let log = agent_log().unwrap_or_default();
    assert!(log.contains("job running: horovodrun"), "{log}");
    assert!(!log.contains("stopping the cluster"), "{log}");
    assert!(
        log.contains(&master) && log.contains(&worker),
        "the agent stops both servers: {log}"
    );
    let states = server_states(&os, &rt, &c.name);
    assert!(
        states.len() == 2 && states.iter().all(|s| s == "Active/None"),
        "{states:?}"
    );
    c.on_node("master", &[&format!("sudo touch {HOLD_RELEASE}")]);
    assert!(
        job.wait().expect("wait for the holding job").success(),
        "the holding job ends once released"
    );

    // Idle: the agent stops the cluster by itself, the worker first. Each server's shelve,
    // from the first look that sees it busy (a task, or shelved) to the first that sees it
    // offloaded.
    let released = Instant::now();
    let deadline = released + Duration::from_secs(1500);
    let mut last_log = log;
    let mut began: Vec<(String, f64)> = Vec::new();
    let mut offloaded: Vec<(String, f64)> = Vec::new();
    let mut looks = 0u32;
    let filter = hvd_cluster::openstack::ServerFilter {
        tags: vec![hvd_cluster::provider::openstack::tag(&c.name)],
        name: None,
    };
    loop {
        use hvd_cluster::openstack::ServerStatus;
        // the log over SSH every 10 s: the master's guest is slow to answer
        if looks.is_multiple_of(5) {
            if let Some(log) = agent_log() {
                last_log = log;
            }
        }
        looks += 1;
        let servers = rt
            .block_on(os.compute().list_servers(&filter))
            .unwrap_or_default();
        let t = released.elapsed().as_secs_f64();
        for s in &servers {
            let name = s.name.clone().unwrap_or_else(|| s.id.clone());
            let busy = s.task_state.is_some()
                || matches!(
                    s.status,
                    ServerStatus::Shelved | ServerStatus::ShelvedOffloaded
                );
            if busy && !began.iter().any(|(n, _)| *n == name) {
                began.push((name.clone(), t));
            }
            if s.status == ServerStatus::ShelvedOffloaded
                && s.task_state.is_none()
                && !offloaded.iter().any(|(n, _)| *n == name)
            {
                offloaded.push((name, t));
            }
        }
        if servers.len() == 2 && offloaded.len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not stop the cluster: {:?}\n{last_log}\n{}",
            server_states(&os, &rt, &c.name),
            api_path_diagnostics(c)
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let stop_took = released.elapsed();
    eprintln!("the agent's last log seen:\n{last_log}");
    assert!(
        last_log.contains(&format!(
            "started: stops the cluster after {AUTOSTOP_IDLE} idle"
        )),
        "{last_log}"
    );
    let at = |seen: &[(String, f64)], name: &str| {
        seen.iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .unwrap_or_else(|| panic!("{name} was seen: {seen:?}"))
    };
    let worker_shelve = at(&offloaded, &worker) - at(&began, &worker);
    let master_shelve = at(&offloaded, &master) - at(&began, &master);
    assert!(
        at(&began, &worker) <= at(&began, &master),
        "the worker is shelved before the master: began {began:?}, offloaded {offloaded:?}"
    );
    eprintln!(
        "bench: shelved and offloaded in {master_shelve:.0}s (the image-backed master, a snapshot to Glance) and {worker_shelve:.0}s (the volume-backed worker, no snapshot)"
    );
    // The agent's last words ("stopping the cluster") are read after `start`, from the log
    // the guest's disk kept: the master stops itself, so SSH may not reach it after they
    // were written.
    let status = c.status_json();
    assert_eq!(status["state"], "stopped", "{status:#}");
    assert!(
        status["autostop"]
            .as_str()
            .is_some_and(|s| s.starts_with("stopping: idle for")),
        "status shows the agent's reason: {status:#}"
    );
    let admin = rt.block_on(common::cloud::client("local-admin"));
    assert_eq!(dp.server_ids.len(), 2);
    for id in &dp.server_ids {
        assert_eq!(
            rt.block_on(common::cloud::allocations(&admin, id)),
            serde_json::json!({}),
            "Placement holds nothing for stopped server {id}"
        );
        assert!(
            !qemu_processes().iter().any(|p| p.contains(id.as_str())),
            "no qemu process runs stopped server {id}"
        );
    }
    let asked = Instant::now();
    assert_eq!(c.status_json()["state"], "stopped");
    let status_took = asked.elapsed();

    if !starts_again() {
        eprintln!(
            "bench: the agent stopped the cluster {:.0}s after the job's release ({AUTOSTOP_IDLE} of them idle); `status` of the stopped cluster {:.2}s; `start` of both not run (HVD_TEST_VMS_START=1 runs it)",
            stop_took.as_secs_f64(),
            status_took.as_secs_f64()
        );
        return;
    }

    // `start` of both. The agent comes back with the master; its grace after a boot lets
    // `start` finish, and `start` with autostop off removes it.
    with_autostop(c, "off");
    let started = Instant::now();
    let start = c.hvd(&["start", &c.profile]);
    let start_took = started.elapsed();
    let out = String::from_utf8_lossy(&start.stdout);
    let err = String::from_utf8_lossy(&start.stderr);
    if !start.status.success() {
        // what the guests say, for the failure's reader (hvd echoes it)
        for node in ["worker-1", "master"] {
            let _ = c.hvd(&[
                "ssh",
                &c.profile,
                node,
                "--",
                "sudo sh -c 'uptime; free -m; findmnt /var/lib/docker; docker ps -a; \
                 for i in $(docker ps -aq); do docker logs --tail 30 $i 2>&1; done; \
                 journalctl -b --no-pager -u docker -u containerd | tail -40; dmesg | tail -40'",
            ]);
        }
    }
    assert!(start.status.success(), "start fails: {err}");
    assert!(out.contains("2 rank(s) joined"), "{out}");
    // The master's disk kept the image; the worker's blank ephemeral disk gets it again from
    // its root disk (booted from the bake) or else from the master, never from this machine
    // or the registry.
    assert!(
        !err.contains("pulled") && !err.contains("image to the master"),
        "the master's disk kept the image: {err}"
    );
    if matches!(worker_image, WorkerImage::Baked) {
        assert!(
            err.contains(&format!(
                "{worker}: data disk: Docker's data from the bake ("
            )) && !err.contains(&format!("master -> {worker}")),
            "the bake's Docker data copied again from the worker's root disk: {err}"
        );
    } else {
        assert!(
            err.contains(&format!("master -> {worker}")),
            "the worker gets the image again from the master: {err}"
        );
    }
    assert_eq!(
        registry.map(|r| r.blob_bytes_sent(GUEST_IMAGE)),
        pulled_before_stop,
        "start takes nothing from the registry"
    );
    assert!(
        err.contains(&format!("{worker}: data disk: Docker's data and /var/tmp are on the flavor's 10 GB ephemeral disk")),
        "the blank ephemeral disk is made Docker's again: {err}"
    );
    for node in ["master", "worker-1"] {
        assert_eq!(
            c.on_node(node, &["cat", "/shared/before-stop.txt"]).trim(),
            mark,
            "/shared on {node} after start"
        );
    }
    let config = c.hvd(&["ssh-config", &c.profile]);
    assert!(
        String::from_utf8_lossy(&config.stdout).contains(&format!("HostName {fip}")),
        "the floating IP is kept"
    );
    assert!(
        err.contains("autostop: off; the agent and its credential are gone")
            && !err.contains("could not say so"),
        "start removes the agent, which says \"off\" last: {err}"
    );
    let kept = c.on_node("master", &["sudo", "cat", hvd_cluster::autostop::AGENT_LOG]);
    assert!(
        kept.contains("stopping the cluster"),
        "the agent said why it stopped the cluster, in the log the guest's disk kept:\n{kept}"
    );
    let status = c.status_json();
    assert_eq!(status["state"], "running", "{status:#}");
    assert_eq!(status["autostop"], "off", "{status:#}");
    assert_eq!(
        DataPlane::of(c).volume_ids,
        dp.volume_ids,
        "the worker boots from the same volume"
    );
    // The boot with the blank disk was a whole one: with /var/tmp bound from fstab it failed
    // basic.target, logind and resolved (no DNS) until a reboot.
    let units = c.on_node(
        "worker-1",
        &["systemctl", "is-active", "basic.target", "systemd-resolved"],
    );
    assert_eq!(
        units.split_whitespace().collect::<Vec<_>>(),
        ["active", "active"],
        "{units}"
    );
    let tmp = c.on_node("worker-1", &["findmnt", "-n", "-o", "SOURCE", "/var/tmp"]);
    assert!(
        tmp.trim().ends_with("[/tmp]"),
        "/var/tmp is on the data disk again: {tmp}"
    );
    eprintln!(
        "bench: the agent stopped the cluster {:.0}s after the job's release ({AUTOSTOP_IDLE} of them idle); `status` of the stopped cluster {:.2}s; `start` of both (the worker's image sent again to its blank ephemeral disk) to a passing check {:.0}s vs the first up {:.0}s ({:.2}x)",
        stop_took.as_secs_f64(),
        status_took.as_secs_f64(),
        start_took.as_secs_f64(),
        up_took.as_secs_f64(),
        start_took.as_secs_f64() / up_took.as_secs_f64().max(1.0)
    );
}

/// What the path from the master's guest to the cloud's API looked like when the agent did not
/// stop the cluster (once every call from the master timed out for 25 minutes after the
/// worker's shelve, unexplained): the network agent's and the API forwarder's last lines, and
/// from the master its routes and a TCP connect to Keystone's and Nova's forwarded ports.
fn api_path_diagnostics(c: &TestCluster) -> String {
    let tail = |name: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/cloud/state/log")
            .join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(30)..].join("\n")
            }
            Err(e) => format!("{}: {e}", path.display()),
        }
    };
    let probe = "ip route; ip -4 -o addr show scope global; for p in 5000 8774; do \
                 timeout 10 bash -c \"</dev/tcp/203.0.113.1/$p\" && echo \"connect 203.0.113.1:$p ok\" \
                 || echo \"connect 203.0.113.1:$p FAILED\"; done";
    let from_master = c
        .command(&[
            "ssh",
            &c.profile,
            "master",
            "--",
            "bash",
            "-c",
            &format!("'{probe}'"),
        ])
        .output()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_else(|e| format!("ssh: {e}"));
    format!(
        "--- from the master:\n{from_master}\n--- hvd-net-agent.log:\n{}\n--- hvd-api-forward.log:\n{}",
        tail("hvd-net-agent.log"),
        tail("hvd-api-forward.log")
    )
}

/// What the master's bake left for the worker booted from it to be checked against.
struct MasterBake {
    name: String,
    /// The master's SSH host key (public) when it was baked.
    host_key: String,
    machine_id: String,
}

/// `bake` of the master after its `up` (in the VM lane): its cluster's keys, files,
/// containers, /shared's export and fstab line set aside on a tmpfs while Nova's libvirt
/// driver snapshots the running guest's root disk live into Glance, then put back, its
/// containers made again by `up` and the check passed. The master is as it was (its host key,
/// /shared exported from its Ceph volume with the file on it). The image's file, as Glance
/// keeps it on this machine, is read whole: no file of its ext4 (mounted read-only) holds the
/// cluster's login key, container key, the master's host key or the login key's
/// authorized_keys line, nor the cluster's own paths; the whole disk's bytes, freed blocks
/// included, are counted apart in a bench line, not asserted: the prepare's fstrim discards
/// what it can (the image went from 3.6 GB to 2.2 GB), but a qcow2 disk frees whole 64 KiB
/// clusters only, and a small freed block beside live data keeps its bytes (2 lines held a key
/// in one run). The profile's workers then boot from it: `scale` below.
fn bake_the_master(c: &TestCluster) -> MasterBake {
    let master = format!("{}-master", c.name);
    let name = format!("{}-bake", c.name);
    let host_key = c.on_node("master", &["cat /etc/ssh/ssh_host_ed25519_key.pub"]);
    let host_private = c.on_node("master", &["sudo cat /etc/ssh/ssh_host_ed25519_key"]);
    let machine_id = c.on_node("master", &["cat /etc/machine-id"]);
    let made = common::bake_node(c, &master, &name, &["--node", "master"]);
    // the test cloud passes the guest's discards to its disk (hw_disk_discard = unmap)
    assert!(
        made.said.contains("; freed blocks discarded)"),
        "{}",
        made.said
    );
    assert!(made.check.contains("1 rank(s) joined"), "{}", made.check);
    let id = made.id;

    // The master as it was: its host key, /shared's line and export, the file on /shared.
    assert_eq!(
        c.on_node("master", &["cat /etc/ssh/ssh_host_ed25519_key.pub"]),
        host_key
    );
    let back = c.on_node(
        "master",
        &["test -s /etc/hvd-cluster/node.json && ! test -e /etc/hvd-cluster-bake && ! test -e /run/hvd-bake && grep -c ' /shared ' /etc/fstab && sudo exportfs -v | grep -c '^/shared'"],
    );
    assert_eq!(
        back.split_whitespace().collect::<Vec<_>>(),
        ["1", "1"],
        "{back}"
    );

    // The image: private, from the master, holding the master's Horovod image.
    let rt = runtime();
    let os = rt.block_on(common::cloud::client("local-user"));
    let images = rt
        .block_on(os.image().list_by_property("hvd_bake_node", &master))
        .expect("list the bakes");
    let image = images
        .iter()
        .find(|i| i["id"] == id.as_str())
        .unwrap_or_else(|| panic!("the bake {id}: {images:#?}"));
    assert_eq!(image["status"], "active");
    assert_eq!(image["visibility"], "private");
    assert_eq!(image["hvd_bake_node"], master.as_str());
    assert_eq!(image["hvd_bake_cluster"], c.name.as_str());

    // Its file as Glance keeps it: the snapshot's ext4 (the VM image is a bare file system),
    // converted to raw and mounted read-only on this machine.
    let file = cloud_dir().join("state/glance/images").join(&id);
    assert!(
        file.is_file(),
        "Glance's file of the bake: {}",
        file.display()
    );
    let secrets = common::bake_secrets(c, &host_private, &host_key);
    let work = tempfile::tempdir().expect("a work dir");
    let raw = work.path().join("bake.raw");
    let mnt = work.path().join("mnt");
    let converted = Command::new("qemu-img")
        .args(["convert", "-O", "raw"])
        .arg(&file)
        .arg(&raw)
        .status()
        .is_ok_and(|s| s.success());
    assert!(converted, "qemu-img convert {}", file.display());
    std::fs::create_dir(&mnt).expect("a mount point");
    let (raw_s, mnt_s) = (raw.display(), mnt.display());
    let in_files = common::searched(
        &format!(
            "mount -o ro,loop,noload {raw_s} {mnt_s} || exit 9; \
             grep -r -a -l -D skip -F -f \"$PATTERNS\" {mnt_s}; rc=$?; \
             ls -d {mnt_s}/etc/hvd-cluster {mnt_s}/etc/ssh/ssh_host_* \
             {mnt_s}/home/debian/.ssh/authorized_keys {mnt_s}/var/lib/cloud/instance \
             {mnt_s}/etc/exports.d/hvd-cluster.exports {mnt_s}/run/hvd-bake/aside 2>/dev/null; \
             grep -c ' /shared ' {mnt_s}/etc/fstab; cat {mnt_s}/etc/hvd-cluster-bake; \
             test -s {mnt_s}/etc/machine-id && echo 'a machine id'; \
             umount {mnt_s}; test $rc = 1"
        ),
        &secrets,
    );
    let freed = common::searched(
        &format!("grep -a -c -F -f \"$PATTERNS\" {raw_s} || test $? = 1"),
        &secrets,
    );
    eprintln!(
        "bench: the bake of {master} ({} MB in Glance) read on this machine: no file holds a \
         secret; {freed} line(s) of its whole disk, freed blocks included, do",
        std::fs::metadata(&file).map(|m| m.len() >> 20).unwrap_or(0)
    );
    let horovod = c.on_node(
        "master",
        &[&format!(
            "sudo docker image inspect -f '{{{{.Id}}}}' {OUR_IMAGE}"
        )],
    );
    assert_eq!(
        in_files,
        format!("0\nbake={name}\nimage={}", horovod.trim()),
        "the bake's file system holds no file with the cluster's keys or the master's host \
         key, none of the cluster's paths, no /shared line, no machine id: only its marker"
    );

    // From here on the workers boot from the bake (the master keeps the stock image). `plan`
    // shows no line for workers while the profile has none (count = 0 until `scale`): its
    // bake line is cloud_hosts' to check.
    let text = std::fs::read_to_string(&c.profile).unwrap();
    let stock = "image = \"debian-12-generic\"\nroot_volume_gb = 12";
    assert!(text.contains(stock), "{text}");
    let text = text.replace(stock, &format!("image = \"{name}\"\nroot_volume_gb = 12"));
    std::fs::write(&c.profile, text).unwrap();
    MasterBake {
        name,
        host_key,
        machine_id,
    }
}

/// A worker guest joins the running cluster (`scale --workers 1`, autostop now on) once the
/// master's guest has been through `up` alone: the guests' heavy work one after the other,
/// not side by side (docs/notes/guests.md). `scale` puts the autostop agent on the master
/// for both servers, and the holding job starts the moment it returns (the agent's idle time
/// runs from there). The worker gets the image from the master over the private network,
/// mounts the master's export with the kernel client (kept in fstab; the file written before
/// `scale` is there), is reached through the master, and its SSH and Horovod ports answer
/// inside the cluster's group only; the check passes across both guests' slots. Returns the
/// data plane with the worker, for the caller's traces after `down`, and the holding job.
fn a_worker_joins(
    c: &TestCluster,
    fip: &str,
    mark: &str,
    baked: Option<&MasterBake>,
) -> (DataPlane, std::process::Child) {
    let master = format!("{}-master", c.name);
    let worker = format!("{}-worker-1", c.name);
    let qemu_before = qemu_processes().len();
    write_hold_script(c);
    let started = Instant::now();
    let scale = c.hvd(&["scale", &c.profile, "--workers", "1"]);
    eprintln!(
        "scale to one worker took {:.0}s",
        started.elapsed().as_secs_f64()
    );
    let out = String::from_utf8_lossy(&scale.stdout).into_owned();
    let said = String::from_utf8_lossy(&scale.stderr).into_owned();
    assert!(scale.status.success(), "scale fails: {said}");
    // At once: the agent's idle time runs from the end of `scale`.
    let job = hold_the_cluster(c);
    assert!(
        said.contains(&format!(
            "autostop: the master stops the cluster after {AUTOSTOP_IDLE} idle"
        )) && said.contains("limited to this cluster's servers"),
        "{said}"
    );
    if let Some(bake) = baked {
        // Booted from the master's bake: no apt transaction for Docker, no image sent, its
        // Docker data copied from the root disk onto the ephemeral disk instead.
        assert!(
            said.contains(&format!(
                "{worker}: booted from the bake {}: Docker and the image already here",
                bake.name
            )),
            "{said}"
        );
        assert!(
            !said.contains(&format!("{worker}: docker applied in"))
                && !said.contains(&format!("master -> {worker}")),
            "nothing installed or sent: {said}"
        );
        assert!(
            said.contains(&format!(
                "{worker}: data disk: Docker's data from the bake ("
            )) && said.contains(") copied from the root disk onto the ephemeral disk"),
            "{said}"
        );
    } else if pulls_a_users_image() {
        assert!(
            said.contains(&format!("{worker}: pulled "))
                && said.contains("through the master's mirror")
                && said.contains("from the registry (each once)"),
            "the worker pulls through the master's mirror: {said}"
        );
    } else {
        assert!(
            said.contains(&format!("master -> {worker} over plain TCP")),
            "the worker gets the master's copy: {said}"
        );
        // the archive the master kept from `up` (no second `docker save` in the guest)
        common::assert_kept_archive_served(&said, &master);
    }
    eprintln!(
        "bench: servers ACTIVE {} after `scale` created the volume-backed worker (its 12 GB root volume made from the image in Ceph first)",
        active_after(&said)
    );
    let check = check_line(&out, "scale");
    assert!(check.contains("2 rank(s) joined"), "{check}");
    assert!(
        check.contains(&master) && check.contains(&worker),
        "{check}"
    );
    assert!(check.contains("kernel NFS on"), "{check}");
    let dp = DataPlane::of(c);
    assert_eq!(dp.server_ids.len(), 2, "a master and a worker");

    // The worker's flavor (v1.vm.eph) has no root disk: the worker boots from the profile's
    // 12 GB volume of type ceph, which Cinder's RBD driver made from the image in the test
    // cloud's Ceph and qemu reads with librbd: the guest's root filesystem is on that disk,
    // grown to its size. The master (v1.vm) boots from its image as before.
    let rt = runtime();
    let os = rt.block_on(common::cloud::client("local-user"));
    let mut root = None;
    for id in &dp.server_ids {
        let server = rt
            .block_on(os.compute().get_server(id))
            .expect("get a server")
            .expect("the server");
        if server.name.as_deref() == Some(worker.as_str()) {
            assert_eq!(server.image_id, None, "{worker} is volume-backed");
            root = server.volumes_attached.first().map(|v| v.id.clone());
            let domain = sh(&format!("virsh -c qemu:///system domname {id}"));
            let xml = sh(&format!(
                "virsh -c qemu:///system dumpxml {}",
                domain.trim()
            ));
            let root_id = root.as_deref().unwrap_or("-");
            assert!(
                xml.contains("protocol='rbd'")
                    && xml.contains(&format!("volumes/volume-{root_id}")),
                "qemu reads the root volume from Ceph: {xml}"
            );
        } else {
            assert!(server.image_id.is_some(), "the master boots from its image");
        }
    }
    let root = root.expect("the worker's root volume");
    let volume = rt
        .block_on(os.volume().get_volume(&root))
        .expect("get the volume")
        .expect("the volume");
    assert_eq!(
        (
            volume.size,
            volume.status.as_str(),
            volume.volume_type.as_deref()
        ),
        (12, "in-use", Some("ceph")),
        "the profile's root volume"
    );
    assert!(
        ceph(&["rbd", "ls", "volumes"]).contains(&format!("volume-{root}")),
        "the volume is an image in Ceph's pool"
    );
    let root_dev = c.on_node("worker-1", &["findmnt", "-n", "-o", "SOURCE", "/"]);
    let root_dev = root_dev.trim();
    let root_size = c.on_node(
        "worker-1",
        &["lsblk", "-d", "-n", "-b", "-o", "SIZE", root_dev],
    );
    assert_eq!(
        root_size.trim(),
        (12u64 << 30).to_string(),
        "{root_dev} is the 12 GB volume"
    );
    let df = c.on_node("worker-1", &["df", "-B1", "--output=size", "/"]);
    let fs_bytes: u64 = df
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    assert!(fs_bytes > 10 << 30, "cloud-init grew / to the volume: {df}");

    // The worker's flavor has a 10 GB ephemeral disk: Docker's data and /var/tmp are on it;
    // the master's flavor has none and keeps today's layout.
    let disk = c.on_node("worker-1", &["sudo", "blkid", "-L", "hvd-data"]);
    let disk = disk.trim();
    assert!(
        said.contains(&format!(
            "{worker}: data disk: Docker's data and /var/tmp are on the flavor's 10 GB ephemeral disk ({disk})"
        )),
        "said in a line: {said}"
    );
    let size = c.on_node("worker-1", &["lsblk", "-d", "-n", "-b", "-o", "SIZE", disk]);
    assert_eq!(
        size.trim(),
        (10u64 << 30).to_string(),
        "{disk} is the 10 GB disk"
    );
    let root_dir = c.on_node(
        "worker-1",
        &["sudo", "docker", "info", "-f", "{{.DockerRootDir}}"],
    );
    assert_eq!(root_dir.trim(), "/var/lib/docker");
    for (target, sub) in [("/var/lib/docker", "/docker"), ("/var/tmp", "/tmp")] {
        let source = c.on_node("worker-1", &["findmnt", "-n", "-o", "SOURCE", target]);
        assert_eq!(source.trim(), format!("{disk}[{sub}]"), "{target}");
    }
    let used = c.on_node(
        "worker-1",
        &["sudo", "du", "-s", "-m", "/var/lib/hvd-cluster/data/docker"],
    );
    let used_mb: u64 = used
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        used_mb > 1000,
        "the image's layers are on the data disk: {used}"
    );
    let fstab = c.on_node("worker-1", &["cat", "/etc/fstab"]);
    assert!(
        fstab.contains("LABEL=hvd-data /var/lib/hvd-cluster/data ext4 defaults,nofail"),
        "{fstab}"
    );
    assert!(!said.contains(&format!("{master}: data disk")), "{said}");
    assert!(
        c.on_node("master", &["sudo", "stat", "-c", "%m", "/var/lib/docker"])
            .trim()
            == "/",
        "the master's Docker stays on its root disk"
    );
    assert!(
        qemu_processes().len() > qemu_before,
        "the worker runs in a qemu process of its own"
    );

    // SSH: the worker through the master.
    let config = c.hvd(&["ssh-config", &c.profile]);
    let config = String::from_utf8_lossy(&config.stdout).into_owned();
    assert!(
        host_block(&config, &worker).contains("ProxyJump"),
        "{config}"
    );
    assert!(config.contains(&format!("HostName {fip}")), "{config}");
    let private = |node: &str, what: &str| {
        c.on_node(node, &["hostname", "-I"])
            .split_whitespace()
            .find(|a| a.starts_with("10.63."))
            .unwrap_or_else(|| panic!("{what}'s private address"))
            .to_string()
    };
    let worker_ip = private("worker-1", "the worker");
    let master_ip = private("master", "the master");

    // /shared on the worker is the master's kernel NFS export, kept in fstab.
    let mount = c.on_node(
        "worker-1",
        &["findmnt", "-n", "-t", "nfs4,nfs", "-o", "SOURCE", "/shared"],
    );
    assert_eq!(mount.trim(), format!("{master_ip}:/shared"));
    let fstab = c.on_node("worker-1", &["cat", "/etc/fstab"]);
    assert!(
        fstab.contains(&format!("{master_ip}:/shared /shared nfs _netdev,nofail")),
        "{fstab}"
    );
    assert_eq!(
        c.on_node("worker-1", &["cat", "/shared/before-stop.txt"])
            .trim(),
        mark
    );

    if let Some(bake) = baked {
        // A server of its own: its host key and machine id are not the master's, and nothing
        // of the master's /shared (its volume's fstab line, its export) came with the bake.
        let own = c.on_node(
            "worker-1",
            &["cat /etc/ssh/ssh_host_ed25519_key.pub /etc/machine-id; grep -c ' /shared ' /etc/fstab; ls /etc/exports.d/ 2>/dev/null | wc -l"],
        );
        assert!(
            !own.contains(bake.host_key.trim()),
            "a host key of its own: {own}"
        );
        assert!(
            !own.contains(bake.machine_id.trim()),
            "a machine id of its own: {own}"
        );
        let counts: Vec<&str> = own.lines().rev().take(2).collect();
        assert_eq!(
            counts,
            ["0", "1"],
            "one /shared line (NFS), no export: {own}"
        );
    }

    // The worker's SSH and Horovod port: open inside the group, closed from outside it.
    let listening = c.on_node("worker-1", &["ss", "-Htln"]);
    assert!(listening.contains(":12345 "), "{listening}");
    let inside = c.on_node(
        "master",
        &[
            "timeout",
            "5",
            "bash",
            "-c",
            &format!("exec 3<>/dev/tcp/{worker_ip}/12345 && echo open"),
        ],
    );
    assert!(
        inside.contains("open"),
        "the master reaches the worker's 12345"
    );
    for port in [22, 12345] {
        assert!(
            !tcp_opens(None, &worker_ip, port),
            "the worker's port {port} must not answer from outside the cluster's group"
        );
        assert!(
            !tcp_opens(Some(ALLOWED_SOURCE), &worker_ip, port),
            "the worker's port {port} must not answer from {ALLOWED_SOURCE}"
        );
    }
    (dp, job)
}

#[test]
fn up_on_stock_debian_vms_gives_a_working_cluster_behind_enforced_security_groups_and_down_leaves_nothing(
) {
    require_cloud();
    require_vm_host();
    let registry = if pulls_a_users_image() {
        Some(registry_with_the_guests_image())
    } else {
        require_horovod_image();
        None
    };
    let image = registry.as_ref().map(|r| r.image(GUEST_IMAGE));
    // One guest: the profile's master (one slot) and no worker (see the module's doc).
    // /shared's Ceph volume is kept by `down` (storage.keep): read after it.
    let one_guest = |p: String| {
        p.replace("[workers]\ncount = 1\n", "[workers]\ncount = 0\n")
            .replace("\nvolume_gb = 2 ", "\nkeep = true\nvolume_gb = 2 ")
    };
    let c = TestCluster::new("local-cloud-vms.toml", "t-vms", |p| match &registry {
        Some(r) => one_guest(p)
            .replace(
                &format!("image = \"{OUR_IMAGE}\""),
                &format!(
                    "image = \"{}\"\nregistry_ca = \"{}\"",
                    r.image(GUEST_IMAGE),
                    r.state.join("ca.crt").display()
                ),
            )
            .replace("source = \"build\"", "source = \"pull\""),
        None => one_guest(p),
    });
    assert!(
        std::fs::read_to_string(&c.profile).is_ok_and(|p| p.contains("count = 0\n")
            && !p.contains("slots")
            && p.contains("keep = true")),
        "the test's profile has one guest, its master's slots the default"
    );
    if let (Some(r), Some(image)) = (&registry, &image) {
        assert!(
            std::fs::read_to_string(&c.profile).is_ok_and(|p| p.contains(image.as_str())),
            "the VM profile pulls {image}"
        );
        // The user's Docker config, as `docker login` leaves it, for every command of this
        // test (its only test): the master pulls with it.
        std::env::set_var("DOCKER_CONFIG", r.state.join("docker"));
        std::env::remove_var("HVD_CLUSTER_REGISTRY_USER");
        std::env::remove_var("HVD_CLUSTER_REGISTRY_PASSWORD");
    }
    let master = format!("{}-master", c.name);
    let qemu_before = qemu_processes().len();
    let mut data_plane = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let started = Instant::now();
        let pulled_before = registry.as_ref().map(|r| r.blob_bytes_sent(GUEST_IMAGE));
        let up = c.hvd(&["up", &c.profile]);
        let up_took = started.elapsed();
        eprintln!("up took {:.0}s", up_took.as_secs_f64());
        data_plane = Some(DataPlane::of(&c));
        assert!(
            up.status.success(),
            "up fails:\n{}",
            common::said_last(&up, 25)
        );
        let out = String::from_utf8_lossy(&up.stdout).into_owned();
        let said = String::from_utf8_lossy(&up.stderr).into_owned();
        eprintln!(
            "bench: servers ACTIVE {} after `up` created the image-backed master",
            active_after(&said)
        );
        assert!(
            !said.contains("autostop:"),
            "autostop is off until `scale`: {said}"
        );

        // The image on the guest: ours from this machine; a user's pulled from the registry
        // over TLS with the credentials of the Docker config, the registry sending about one
        // copy, the password in no output.
        if registry.is_none() {
            assert!(
                said.contains(&format!("{master}: image to the master over SSH")),
                "{said}"
            );
        }
        if let (Some(r), Some(image), Some(before)) = (&registry, &image, pulled_before) {
            assert!(
                said.contains(&format!("{master}: pulled {image} in")),
                "{said}"
            );
            r.assert_sent_one_copy(GUEST_IMAGE, before);
            assert!(
                said.contains("the image has no Jupyter Lab: installed it from PyPI"),
                "{said}"
            );
            let status = c.hvd(&["status", &c.profile, "--json"]);
            for text in [
                &out,
                &said,
                &String::from_utf8_lossy(&status.stdout).into_owned(),
            ] {
                assert!(!text.contains(&r.password), "the password was shown");
            }
        }

        // One libvirt guest: a qemu process for the server, named by its instance name.
        let dp = data_plane.as_ref().unwrap();
        assert_eq!(dp.server_ids.len(), 1, "the master alone");
        let qemu = qemu_processes();
        assert!(
            qemu.len() > qemu_before,
            "one qemu process per server: {qemu:#?}"
        );
        for id in &dp.server_ids {
            let domain = sh(&format!("virsh -c qemu:///system domname {id}"));
            let domain = domain.trim();
            assert!(
                domain.starts_with("instance-"),
                "server {id} is a libvirt domain: `{domain}`"
            );
            let guest = format!("guest={domain},");
            assert_eq!(
                qemu.iter().filter(|p| p.contains(&guest)).count(),
                1,
                "exactly one qemu process runs {domain}"
            );
        }

        // The check passed on the master's slot.
        let check = check_line(&out, "up");
        assert!(check.contains("1 rank(s) joined"), "{check}");
        assert!(check.contains(&master), "{check}");

        // SSH: the master by its floating IP.
        let config = c.hvd(&["ssh-config", &c.profile]);
        let config = String::from_utf8_lossy(&config.stdout).into_owned();
        let fip = host_block(&config, &master)
            .lines()
            .find_map(|l| l.trim().strip_prefix("HostName "))
            .expect("the master's HostName")
            .to_string();
        assert!(fip.starts_with("203.0.113."), "{config}");
        assert!(
            !host_block(&config, &master).contains("ProxyJump"),
            "{config}"
        );
        let kernel = c.on_node("master", &["uname", "-r"]);
        assert!(!kernel.trim().is_empty());

        // /shared is the master's kernel NFS export (Debian's nfs-kernel-server, installed
        // by `up`) to the cluster's subnet.
        let exports = c.on_node("master", &["sudo", "exportfs", "-v"]);
        assert!(
            exports.contains("/shared") && exports.contains("10.63.0.0/24"),
            "{exports}"
        );
        let server = c.on_node("master", &["systemctl", "is-active", "nfs-server"]);
        assert_eq!(server.trim(), "active");
        // ... from the master's own volume on the test cloud's Ceph (storage.volume_gb), which
        // `up` formatted (it was blank) and mounts by UUID: not the root disk, so not in the
        // snapshot `stop` makes.
        let on = c.on_node(
            "master",
            &["findmnt", "-n", "-o", "SOURCE,FSTYPE", "/shared"],
        );
        let mut on = on.split_whitespace();
        let (device, fs) = (on.next().unwrap_or_default(), on.next().unwrap_or_default());
        assert!(
            device.starts_with("/dev/vd") && fs == "ext4",
            "{device} {fs}"
        );
        let label = c.on_node(
            "master",
            &["sudo", "blkid", "-o", "value", "-s", "LABEL", device],
        );
        assert_eq!(label.trim(), "hvd-shared");
        let fstab = c.on_node("master", &["cat", "/etc/fstab"]);
        assert!(fstab.contains(" /shared auto defaults,nofail"), "{fstab}");

        // The Jupyter URL answers through `hvd-cluster jupyter`'s tunnel.
        let mut tunnel = c
            .command(&["jupyter", &c.profile])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hvd-cluster jupyter");
        let mut first = String::new();
        BufReader::new(tunnel.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let url = first.split_whitespace().next().unwrap_or("").to_string();
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "jupyter said: {first}"
        );
        let (status, body) = http_get(&url);
        let _ = tunnel.kill();
        let _ = tunnel.wait();
        assert!(status.contains(" 200 "), "{status}");
        assert!(body.contains("JupyterLab"), "{body}");

        // Security groups, from outside: SSH from inside allowed_cidrs, not from outside them.
        assert!(
            eventually_opens(Some(ALLOWED_SOURCE), &fip, 22, Duration::from_secs(30)),
            "the master's SSH answers from {ALLOWED_SOURCE} (in allowed_cidrs)"
        );
        assert!(
            !tcp_opens(Some(OUTSIDE_SOURCE), &fip, 22),
            "the master's SSH must not answer from {OUTSIDE_SOURCE}"
        );
        // The containers' SSH (Horovod's) port listens on the master, yet only the group
        // reaches it: closed from the source whose SSH answers above.
        let listening = c.on_node("master", &["ss", "-Htln"]);
        assert!(listening.contains(":12345 "), "{listening}");
        assert!(
            !tcp_opens(Some(ALLOWED_SOURCE), &fip, 12345),
            "port 12345 must not answer from {ALLOWED_SOURCE}, outside the cluster's group"
        );
        // Jupyter listens on the master, yet its port is closed on the floating IP.
        let listening = c.on_node("master", &["ss", "-Htln"]);
        assert!(listening.contains(":8888 "), "{listening}");
        assert!(
            !tcp_opens(None, &fip, 8888),
            "jupyter = \"tunnel\": port 8888 must be closed on {fip}"
        );

        gpu_runtime_on_the_master(&c);

        // Autostop comes on with the worker: `scale` puts the agent in place for both.
        let mark = format!("written before the stop by {}", c.name);
        c.on_node(
            "master",
            &[&format!("echo '{mark}' | sudo tee /shared/before-stop.txt")],
        );
        // The worker boots from the master's bake (with our image; a user's pulled image
        // takes the stock path, by hand).
        let baked = (!pulls_a_users_image()).then(|| bake_the_master(&c));
        with_autostop(&c, AUTOSTOP_IDLE);
        let (grown, job) = a_worker_joins(&c, &fip, &mark, baked.as_ref());
        data_plane = Some(grown);
        let dp = data_plane.as_ref().unwrap();
        autostop_then_start(
            &c,
            job,
            dp,
            &fip,
            &mark,
            up_took,
            match &registry {
                Some(r) => WorkerImage::Pulled(r),
                None => WorkerImage::Baked,
            },
        );
    }));

    // down, also after a failure, then nothing of the cluster anywhere but /shared's kept
    // volume, which holds what the job wrote before the stop; the test deletes it then.
    let down = c.hvd(&["down", "--yes", &c.profile]);
    let rt = runtime();
    let os = rt.block_on(common::cloud::client("local-user"));
    let kept = the_kept_volume_holds_the_file(&c, &os, &rt);
    // `down` leaves the bake (the user's): deleted by `bake --delete` after a passing test,
    // by the API after a failed one.
    let bakes = rt
        .block_on(os.image().list_by_property("hvd_bake_cluster", &c.name))
        .unwrap_or_default();
    let mut deleted = Vec::new();
    for image in &bakes {
        let (Some(id), Some(name)) = (image["id"].as_str(), image["name"].as_str()) else {
            continue;
        };
        if result.is_ok() {
            deleted.push(c.hvd(&["bake", &c.profile, "--delete", name, "--yes"]));
        } else {
            let _ = rt.block_on(os.image().delete_image(id));
        }
    }
    let left = rt.block_on(leftovers(&os, &c.name));
    let mut traces = Vec::new();
    if let Some(dp) = &data_plane {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            traces = dp.traces();
            if traces.is_empty() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_secs(3));
        }
    }
    for src in [ALLOWED_SOURCE, OUTSIDE_SOURCE] {
        let _ = Command::new(cloud_dir().join("public-source"))
            .args(["--delete", src])
            .status();
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(down.status.success(), "down fails");
    if !pulls_a_users_image() {
        assert_eq!(bakes.len(), 1, "down leaves the master's bake: {bakes:#?}");
        assert!(
            deleted.iter().all(|d| d.status.success()),
            "bake --delete --yes"
        );
    }
    let kept = kept.expect("down keeps /shared's volume");
    assert!(
        String::from_utf8_lossy(&down.stdout)
            .contains(&format!("kept (storage.keep): volume {}", kept.0)),
        "down names the kept volume"
    );
    assert!(
        kept.1.contains("written before the stop by"),
        "the kept volume holds /shared's file: {:?}",
        kept.1
    );
    assert_eq!(
        left,
        Vec::<String>::new(),
        "down leaves nothing in the cloud"
    );
    assert_eq!(
        traces,
        Vec::<String>::new(),
        "down leaves no qemu process, bridge, tap or nftables rule"
    );
}
