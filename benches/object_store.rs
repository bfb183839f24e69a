//! `[[data]] object_store` against the object store's own client on the same node, in the
//! same run: a dataset of `HVD_BENCH_OBJECTS` objects (10,000 by default, 20-200 KB of random
//! bytes each: ~1.1 GB) in the local cloud's Swift, copied into /shared on a one-node
//! real-host cluster (profiles/local-cloud-hosts.toml, no workers) by
//!
//! - hvd-cluster: the master's copy that `up` runs (the seconds its `data:` line gives);
//! - `swift download` (Debian's python3-swiftclient on the master, its default threads), with
//!   the same read-only credential;
//! - `openstack object save` one object at a time (Debian's python3-openstackclient), on a
//!   sample of `HVD_BENCH_SAVE_SAMPLE` objects (20 by default), scaled to the whole set: one
//!   process per object costs seconds of imports, hours for 10,000.
//!
//! Each of the first two the median of three runs into an emptied folder. Prints
//!
//!   object_store objects=N bytes=B way=hvd-cluster secs=S
//!   object_store objects=N bytes=B way=swift-download secs=S
//!   object_store objects=N bytes=B way=openstack-object-save secs=S (sample=K)
//!   object_store ratio hvd/swift=R save/hvd=R
//!
//! and asserts nothing about time. Needs the cloud and the node image:
//! `tests/cloud/install && tests/cloud/start && scripts/build-images node`.
//!
//!   cargo bench --bench object_store
//!   HVD_BENCH_OBJECTS=2000 cargo bench --bench object_store

mod common;
#[path = "common/local.rs"]
mod local;

use std::path::Path;
use std::process::Command;

use local::{make_dataset, median, Cluster};

const ROUNDS: usize = 3;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The seconds of the `data: object store: ... in S s` line `up` printed.
fn fetch_seconds(said: &str) -> f64 {
    said.lines()
        .find_map(|l| {
            let rest = l.split("object store: ").nth(1)?;
            let s = rest.rsplit(" in ").next()?.split(" s").next()?;
            s.trim().parse().ok()
        })
        .unwrap_or_else(|| panic!("no object store line in:\n{said}"))
}

/// The cloud's own swift client (its venv, tests/cloud/install) as the user demo.
fn swift_as_demo() -> Command {
    let venv = std::env::var("HVD_CLOUD_HOME").unwrap_or_else(|_| "/opt/hvd-cluster-cloud".into());
    let mut swift = Command::new(format!("{venv}/venv/bin/swift"));
    swift.args(["--auth-version", "3"]).envs([
        ("OS_AUTH_URL", "http://127.0.0.1:5000/v3"),
        ("OS_USERNAME", "demo"),
        ("OS_PASSWORD", "secret"),
        ("OS_PROJECT_NAME", "demo"),
        ("OS_USER_DOMAIN_NAME", "Default"),
        ("OS_PROJECT_DOMAIN_NAME", "Default"),
    ]);
    swift
}

/// `script` run by the master's shell (one word: `ssh` joins its words as ssh does).
fn on_master(c: &Cluster, script: &str) -> String {
    c.hvd(&["ssh", c.profile.to_str().unwrap(), "master", "--", script])
}

fn main() {
    let objects = env_number("HVD_BENCH_OBJECTS", 10_000);
    let sample = env_number("HVD_BENCH_SAVE_SAMPLE", 20).min(objects);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let clouds = common::local_clouds_yaml();
    std::env::set_var("OS_CLIENT_CONFIG_FILE", &clouds);
    let dir = tempfile::tempdir().unwrap();
    let name = format!("bo-{}", std::process::id() % 10_000);
    let container = format!("{name}-data");

    // the dataset, uploaded with the cloud's own client (not timed)
    let data = dir.path().join("data");
    let bytes = make_dataset(&data, objects);
    let up = swift_as_demo()
        .current_dir(&data)
        .args(["upload", "--object-threads", "20"])
        .args(["--object-name", "ds", &container, "."])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("the cloud's swift client");
    assert!(up.success(), "swift upload");

    let text = std::fs::read_to_string(root.join("profiles/local-cloud-hosts.toml"))
        .unwrap()
        .replace("name = \"hvd-hosts\"", &format!("name = \"{name}\""))
        .replace("count = 2", "count = 0");
    let profile = dir.path().join("bench.toml");
    std::fs::write(
        &profile,
        format!(
            "{text}\n[lifecycle]\nidentity_url = \"http://203.0.113.1:5000/v3\"\n\n[[data]]\nobject_store = \"{container}/ds\"\n"
        ),
    )
    .unwrap();
    let p = profile.to_str().unwrap().to_owned();
    let c = Cluster {
        name: name.clone(),
        profile: profile.clone(),
        state: dir.path().join("state"),
    };
    let up_said = |c: &Cluster| {
        let out = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
            .args(["up", &p])
            .env("HVD_CLUSTER_STATE_DIR", &c.state)
            .output()
            .expect("run hvd-cluster");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "up: {said}");
        said
    };
    let first = fetch_seconds(&up_said(&c));
    eprintln!("first copy (into the new cluster): {first:.1} s");

    // the baselines' clients, from Debian's packages (not timed)
    on_master(
        &c,
        "sudo apt-get update -q >/dev/null && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-swiftclient python3-openstackclient >/dev/null",
    );
    // the master's own read-only credential, as the baselines' environment
    let creds = "eval \"$(sudo python3 -c 'import json,shlex; c=json.load(open(\"/var/lib/hvd-cluster/objects/credential.json\")); print(\"export OS_AUTH_TYPE=v3applicationcredential OS_AUTH_URL=%s OS_APPLICATION_CREDENTIAL_ID=%s OS_APPLICATION_CREDENTIAL_SECRET=%s\" % tuple(shlex.quote(c[k]) for k in (\"identity_url\", \"credential_id\", \"credential_secret\")))')\"";
    let timed_remote = |c: &Cluster, command: &str| -> f64 {
        let out = on_master(
            c,
            &format!(
                "set -e; {creds}; sync; s=$(date +%s.%N); {command} >/dev/null; e=$(date +%s.%N); python3 -c \"print($e - $s)\""
            ),
        );
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{command}: {out}"))
    };

    let mut ours = Vec::new();
    let mut swift = Vec::new();
    for _ in 0..ROUNDS {
        on_master(&c, "sudo rm -rf /shared/ds /shared/sd && sync");
        ours.push(fetch_seconds(&up_said(&c)));
        swift.push(timed_remote(
            &c,
            &format!(
                "cd /shared && mkdir -p sd && cd sd && swift download {container} --prefix ds/"
            ),
        ));
    }
    let save = timed_remote(
        &c,
        &format!(
            "cd /shared && rm -rf save && mkdir save && cd save && openstack object list {container} --prefix ds/ -f value -c Name | head -n {sample} | while read -r o; do openstack object save --file \"$(basename \"$o\")\" {container} \"$o\"; done"
        ),
    ) * objects as f64
        / sample.max(1) as f64;
    drop(c); // down
    let _ = swift_as_demo()
        .args(["delete", &container])
        .stdout(std::process::Stdio::null())
        .status();
    let (ours, swift) = (median(ours), median(swift));
    println!("object_store objects={objects} bytes={bytes} way=hvd-cluster secs={ours:.2}");
    println!("object_store objects={objects} bytes={bytes} way=swift-download secs={swift:.2}");
    println!(
        "object_store objects={objects} bytes={bytes} way=openstack-object-save secs={save:.0} (sample={sample})"
    );
    println!(
        "object_store ratio hvd/swift={:.2} save/hvd={:.0}",
        ours / swift,
        save / ours
    );
}
