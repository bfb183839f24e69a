//! `hvd-cluster` end to end against the project's real local OpenStack cloud (tests/cloud),
//! acting as the non-admin user: up --infra-only, up again, status, stop and start, down —
//! with the state folder lost, with the process killed mid-way, over quota, and with unknown
//! names.
//!
//! Needs the cloud: `tests/cloud/install && tests/cloud/start` (scripts/test does it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;

use common::cloud::{
    allocations, client, clouds_yaml, in_api_project, leftovers, require_cloud, runtime, API_CLOUD,
};

/// The tests share one project's quota (`api`, their own): run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

struct Cluster {
    name: String,
    profile: PathBuf,
    state: tempfile::TempDir,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// profiles/local-cloud.toml with a unique name and `edit` applied.
    fn new(prefix: &str, edit: impl Fn(String) -> String) -> Cluster {
        let name = format!("{prefix}-{}", std::process::id() % 100000);
        let base = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/local-cloud.toml"),
        )
        .unwrap();
        let text = edit(in_api_project(
            &base.replace("name = \"hvd-local\"", &format!("name = \"{name}\"")),
        ));
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("profile.toml");
        std::fs::write(&profile, text).unwrap();
        Cluster {
            name,
            profile,
            state: tempfile::tempdir().unwrap(),
            _dir: dir,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"));
        c.args(args)
            .env("HVD_CLUSTER_STATE_DIR", self.state.path())
            .env("OS_CLIENT_CONFIG_FILE", clouds_yaml());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = self.cmd(args).output().unwrap();
        eprintln!(
            "$ hvd-cluster {}\n--- exit {:?}\n{}{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn profile(&self) -> &str {
        self.profile.to_str().unwrap()
    }

    fn status_json(&self) -> serde_json::Value {
        let out = self.run(&["status", self.profile(), "--json"]);
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
    }
}

fn assert_complete(c: &Cluster, workers: usize) {
    let status = c.status_json();
    let resources = status["resources"].as_array().unwrap();
    let count = |kind: &str| resources.iter().filter(|r| r["kind"] == kind).count();
    assert_eq!(count("server"), workers + 1, "{status:#}");
    assert_eq!(count("network"), 1);
    assert_eq!(count("subnet"), 1);
    assert_eq!(count("router"), 1);
    assert_eq!(count("security-group"), 2);
    assert_eq!(count("floating-ip"), 1);
    assert_eq!(count("share"), 1);
    assert_eq!(count("keypair"), 1);
    assert!(
        resources.iter().all(|r| r["health"]["state"] == "ready"),
        "{status:#}"
    );
    assert_eq!(status["healthy"], true);
    let nodes = status["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), workers + 1);
    assert_eq!(nodes[0]["role"], "master");
    assert!(
        nodes[0]["public_ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("203.0.113.")),
        "{status:#}"
    );
    assert!(
        nodes.iter().all(|n| n["private_ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.42.0."))),
        "{status:#}"
    );
}

#[test]
fn up_again_status_down_leaves_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_cloud();
    let rt = runtime();
    let os = rt.block_on(client(API_CLOUD));
    let c = Cluster::new("t-full", |p| p);

    let plan = c.run(&["plan", c.profile(), "--json"]);
    assert_eq!(plan.status.code(), Some(10), "plan before up has changes");
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["counts"]["create"], 12);

    let up = c.run(&["up", c.profile(), "--infra-only"]);
    assert!(up.status.success());
    assert!(String::from_utf8_lossy(&up.stdout).contains(&format!("{}-master", c.name)));
    assert_complete(&c, 3);

    // A second up on a complete cluster changes nothing.
    let again = c.run(&["up", c.profile(), "--infra-only"]);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("nothing to change"));
    let plan = c.run(&["plan", c.profile()]);
    assert_eq!(plan.status.code(), Some(0), "plan after up is empty");

    // `up` past the infrastructure, the image pulled on the nodes (nothing built here): the
    // fake driver's servers boot nothing, so none answers SSH within `--ssh-wait`, and the
    // error shows what the master's console said, read through Nova (os-getConsoleOutput:
    // the fake driver's three lines), escaped line by line.
    let text = std::fs::read_to_string(&c.profile).unwrap();
    let pulled = text.replace("[container]\n", "[container]\nsource = \"pull\"\n");
    assert_ne!(pulled, text);
    std::fs::write(&c.profile, pulled).unwrap();
    let no_ssh = c.run(&["up", c.profile(), "--ssh-wait", "10"]);
    let err = String::from_utf8_lossy(&no_ssh.stderr);
    assert_eq!(no_ssh.status.code(), Some(1), "{err}");
    let master = format!("{}-master: still no SSH after 10s; last reason: ", c.name);
    assert!(err.contains(&master), "{err}");
    assert!(
        err.contains(
            "  the last 3 line(s) of its console, read through the cloud:\n    FAKE CONSOLE \
             OUTPUT\n    ANOTHER\n    LAST LINE"
        ),
        "{err}"
    );

    let down = c.run(&["down", "--yes", c.profile()]);
    assert!(down.status.success());
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());
    assert!(
        !c.state.path().join(&c.name).exists(),
        "down removes the state folder"
    );

    // Idempotent.
    assert!(c.run(&["down", "--yes", c.profile()]).status.success());
}

/// `down` with the local state lost finds everything by tag, and leaves /shared's volume
/// marked `storage.keep` (saying so); the next `up` finds that volume and attaches it again;
/// `down` leaves it again. Then the profile names that volume as an existing one
/// (`storage.volume = ID`): taken and attached, left by `down`; another cluster naming it is
/// refused before anything is made. Only then does the test delete it.
#[test]
fn down_without_local_state_finds_everything_by_tag_and_keeps_the_kept_volume() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_cloud();
    let rt = runtime();
    let os = rt.block_on(client(API_CLOUD));
    let c = Cluster::new("t-nostate", |p| {
        p.replace("count = 3", "count = 1").replace(
            "kind = \"manila\"               # or \"master-nfs\" (NFS server on the master; volume_gb = N adds a Cinder volume)\nsize_gb = 10",
            "kind = \"master-nfs\"\nvolume_gb = 1\nkeep = true",
        )
    });
    let volume = format!("{}-shared-volume", c.name);
    let volume_id = |c: &Cluster| -> String {
        let status = c.status_json();
        let resources = status["resources"].as_array().unwrap();
        assert!(
            resources
                .iter()
                .any(|r| r["kind"] == "volume-attachment" && r["health"]["state"] == "ready"),
            "{status:#}"
        );
        resources
            .iter()
            .find(|r| r["kind"] == "volume" && r["name"] == volume.as_str())
            .and_then(|r| r["id"].as_str())
            .unwrap_or_else(|| panic!("no {volume}: {status:#}"))
            .to_string()
    };
    let kept_alone = |os: &hvd_cluster::openstack::OpenStack| {
        let left = rt.block_on(leftovers(os, &c.name));
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(
            left[0].starts_with(&format!("volume {volume} (")),
            "{left:?}"
        );
    };

    assert!(c.run(&["up", c.profile(), "--infra-only"]).status.success());
    let first = volume_id(&c);
    std::fs::remove_dir_all(c.state.path().join(&c.name)).unwrap();
    let down = c.run(&["down", "--yes", "--cluster", &c.name, "--cloud", API_CLOUD]);
    assert!(down.status.success());
    let (out, err) = (
        String::from_utf8_lossy(&down.stdout),
        String::from_utf8_lossy(&down.stderr),
    );
    assert!(
        out.contains(&format!("deleted; kept (storage.keep): volume {volume}")),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "kept: volume {volume} ({first}), marked storage.keep"
        )),
        "{err}"
    );
    kept_alone(&os);

    // The next `up` makes the rest and attaches the same volume, its master in the volume's
    // zone (Cinder's and Nova's are both `nova` here), as `plan` says first.
    let plan = c.run(&["plan", c.profile()]);
    let said = String::from_utf8_lossy(&plan.stdout);
    assert!(
        said.contains("master: in availability zone `nova`, the zone of /shared's volume"),
        "{said}"
    );
    let up = c.run(&["up", c.profile(), "--infra-only"]);
    assert!(up.status.success());
    assert_eq!(volume_id(&c), first, "the kept volume, not a new one");
    assert!(c.run(&["down", "--yes", c.profile()]).status.success());
    kept_alone(&os);

    // The same volume named as an existing one: taken, attached, left again.
    let text = std::fs::read_to_string(&c.profile).unwrap();
    let existing = |text: &str| {
        text.replace(
            "volume_gb = 1\nkeep = true",
            &format!("volume = \"{first}\""),
        )
    };
    std::fs::write(&c.profile, existing(&text)).unwrap();
    let plan = c.run(&["plan", c.profile()]);
    let said = String::from_utf8_lossy(&plan.stdout);
    assert!(
        said.contains(&format!("/shared: the existing volume `{first}`")),
        "plan says where /shared lives"
    );
    // The test cloud's Cinder and Nova both have the zone `nova`: the master goes there.
    assert!(
        said.contains("master: in availability zone `nova`, the zone of /shared's volume"),
        "{said}"
    );
    assert!(c.run(&["up", c.profile(), "--infra-only"]).status.success());
    assert_eq!(volume_id(&c), first, "the existing volume");
    assert!(c.run(&["down", "--yes", c.profile()]).status.success());
    kept_alone(&os);
    // Another cluster may not take this cluster's /shared: refused, nothing made.
    let thief = Cluster::new("t-thief", |p| {
        existing(&p.replace("count = 3", "count = 1").replace(
            "kind = \"manila\"               # or \"master-nfs\" (NFS server on the master; volume_gb = N adds a Cinder volume)\nsize_gb = 10",
            "kind = \"master-nfs\"\nvolume_gb = 1\nkeep = true",
        ))
    });
    let refused = thief.run(&["up", thief.profile(), "--infra-only"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "storage.volume `{first}`: it is cluster `{}`'s",
            c.name
        )),
        "{err}"
    );
    assert_eq!(
        rt.block_on(leftovers(&os, &thief.name)),
        Vec::<String>::new()
    );
    rt.block_on(os.volume().delete_volume(&first)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !rt.block_on(leftovers(&os, &c.name)).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(2));
    }
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());
}

/// `storage.keep` on a Manila share: `down` leaves the share and takes back the cluster's
/// access rule (its network goes); the next `up` finds the same share and opens it again.
/// Another cluster naming it (`storage.share`) is refused before anything is made. A share
/// the project already has, unmarked, is taken by name (`storage.share`), opened, and left
/// by `down` with its own rules as they were. Only then does the test delete both.
#[test]
fn a_kept_share_outlives_down_and_an_existing_one_is_taken_and_left() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_cloud();
    let rt = runtime();
    let os = rt.block_on(client(API_CLOUD));
    let subnet = "10.42.0.0/24"; // profiles/local-cloud.toml's network.cidr
    let rules_for = |id: &str| -> Vec<hvd_cluster::openstack::AccessRule> {
        rt.block_on(os.share().list_access_rules(id))
            .unwrap()
            .into_iter()
            .filter(|r| r.access_to == subnet && r.state.as_deref() != Some("denying"))
            .collect()
    };
    let share_of = |c: &Cluster| -> String {
        let status = c.status_json();
        let resources = status["resources"].as_array().unwrap();
        let share = resources
            .iter()
            .find(|r| r["kind"] == "share" && r["name"] == format!("{}-share", c.name))
            .unwrap_or_else(|| panic!("no share: {status:#}"));
        assert_eq!(share["health"]["state"], "ready", "{status:#}");
        share["id"].as_str().unwrap().to_string()
    };
    let open_to_subnet = |id: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let rules = rules_for(id);
            if rules
                .iter()
                .any(|r| r.access_level == "rw" && r.state.as_deref() == Some("active"))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "share {id} never opened to {subnet}: {rules:?}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    };
    let no_workers = |p: String| p.replace("count = 3", "count = 0");
    let c = Cluster::new("t-keepshare", |p| {
        no_workers(p).replace("size_gb = 10", "size_gb = 1\nkeep = true")
    });
    let plan = c.run(&["plan", c.profile()]);
    assert!(
        String::from_utf8_lossy(&plan.stdout).contains("kept by `down` (storage.keep)"),
        "plan says the share outlives down"
    );
    assert!(c.run(&["up", c.profile(), "--infra-only"]).status.success());
    let first = share_of(&c);
    open_to_subnet(&first);
    let down = c.run(&["down", "--yes", c.profile()]);
    let (out, err) = (
        String::from_utf8_lossy(&down.stdout),
        String::from_utf8_lossy(&down.stderr),
    );
    assert!(down.status.success(), "{err}");
    assert!(out.contains("kept (storage.keep): share"), "{out}");
    assert!(
        err.contains("access rule (10.42.0.0/24) taken back"),
        "{err}"
    );
    assert_eq!(
        rt.block_on(leftovers(&os, &c.name)),
        vec![format!("share {}-share", c.name)]
    );
    assert!(
        rules_for(&first).is_empty(),
        "down takes the cluster's rule back"
    );

    // The next `up` of the same profile: the same share, open again.
    let up = c.run(&["up", c.profile(), "--infra-only"]);
    assert!(up.status.success());
    assert!(
        String::from_utf8_lossy(&up.stderr).contains("open to 10.42.0.0/24 (read-write)"),
        "up says it opened the kept share"
    );
    assert_eq!(share_of(&c), first, "the kept share, not a new one");
    open_to_subnet(&first);
    assert!(c.run(&["down", "--yes", c.profile()]).status.success());
    assert!(rules_for(&first).is_empty());

    // Another cluster may not take this cluster's /shared: refused, nothing made.
    let taking = |share: String| {
        move |p: String| no_workers(p).replace("size_gb = 10", &format!("share = \"{share}\""))
    };
    let thief = Cluster::new("t-sharethief", taking(first.clone()));
    let refused = thief.run(&["up", thief.profile(), "--infra-only"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "storage.share `{first}`: it is cluster `{}`'s",
            c.name
        )),
        "{err}"
    );
    assert_eq!(
        rt.block_on(leftovers(&os, &thief.name)),
        Vec::<String>::new()
    );

    // A share of the project's own, with a rule of its own: taken by name, left as it was.
    let mine = format!("t-datasets-{}", std::process::id() % 100000);
    let made = rt
        .block_on(
            os.share()
                .create_share(&hvd_cluster::openstack::ShareCreate {
                    name: mine.clone(),
                    size: 1,
                    ..Default::default()
                }),
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !rt
        .block_on(os.share().get_share(&made.id))
        .unwrap()
        .is_some_and(|s| s.is_available())
    {
        assert!(Instant::now() < deadline, "share {mine} not available");
        std::thread::sleep(Duration::from_secs(1));
    }
    rt.block_on(os.share().allow_ip_access(&made.id, "192.0.2.10", false))
        .unwrap();
    let user = Cluster::new("t-takeshare", taking(mine.clone()));
    // More [[data]] than the share holds (a sparse 2 GiB file): refused before anything is made.
    let text = std::fs::read_to_string(&user.profile).unwrap();
    let big = user._dir.path().join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    std::fs::write(
        &user.profile,
        format!("{text}\n[[data]]\nlocal = \"{}\"\n", big.display()),
    )
    .unwrap();
    let too_big = user.run(&["up", user.profile(), "--infra-only"]);
    let err = String::from_utf8_lossy(&too_big.stderr);
    assert_eq!(too_big.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "2.00 GiB of local entries go to /shared, more than the 1 GiB of share `{mine}`"
        )),
        "{err}"
    );
    assert_eq!(
        rt.block_on(leftovers(&os, &user.name)),
        Vec::<String>::new()
    );
    std::fs::write(&user.profile, text).unwrap();
    assert!(user
        .run(&["up", user.profile(), "--infra-only"])
        .status
        .success());
    assert_eq!(share_of(&user), made.id, "the project's share is /shared");
    open_to_subnet(&made.id);
    let down = user.run(&["down", "--yes", user.profile()]);
    assert!(down.status.success());
    let out = String::from_utf8_lossy(&down.stdout);
    assert!(
        out.contains(&format!("deleted; kept (storage.keep): share {mine}")),
        "down names the share as the user did: {out}"
    );
    let after = rt
        .block_on(os.share().get_share(&made.id))
        .unwrap()
        .expect("left by down");
    assert_eq!(
        after.name.as_deref(),
        Some(mine.as_str()),
        "its own name stays"
    );
    assert!(rules_for(&made.id).is_empty());
    let own: Vec<_> = rt
        .block_on(os.share().list_access_rules(&made.id))
        .unwrap()
        .into_iter()
        .filter(|r| r.access_to == "192.0.2.10")
        .collect();
    assert_eq!(own.len(), 1, "its own rule stays: {own:?}");

    for id in [&first, &made.id] {
        rt.block_on(os.share().delete_share(id)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(rt.block_on(leftovers(&os, &c.name)).is_empty()
        && rt.block_on(leftovers(&os, &user.name)).is_empty())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_secs(2));
    }
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());
    assert_eq!(
        rt.block_on(leftovers(&os, &user.name)),
        Vec::<String>::new()
    );
}

/// Starts `up --infra-only`, waits until `marker` shows in its progress, then sends `signal`.
fn interrupt_up(c: &Cluster, signal: &str, marker: &str) {
    interrupt(c, &["up", c.profile(), "--infra-only"], signal, marker)
}

/// Starts hvd-cluster with `args`, waits until `marker` shows in its progress, then sends
/// `signal`.
fn interrupt(c: &Cluster, args: &[&str], signal: &str, marker: &str) {
    common::interrupt::at_marker(c.cmd(args), signal, marker, Duration::from_secs(180));
}

#[test]
fn killed_up_resumes_and_down_cleans() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_cloud();
    let rt = runtime();
    let os = rt.block_on(client(API_CLOUD));
    for (signal, marker) in [("-INT", "+ subnet"), ("-KILL", "+ server")] {
        let c = Cluster::new(if signal == "-INT" { "t-int" } else { "t-kill" }, |p| {
            p.replace("count = 3", "count = 2")
        });
        interrupt_up(&c, signal, marker);
        let resumed = c.run(&["up", c.profile(), "--infra-only"]);
        assert!(resumed.status.success(), "up after {signal} resumes");
        assert_complete(&c, 2);
        assert!(c.run(&["down", "--yes", c.profile()]).status.success());
        assert_eq!(
            rt.block_on(leftovers(&os, &c.name)),
            Vec::<String>::new(),
            "after {signal}"
        );
    }
}

#[test]
fn over_quota_and_unknown_names_create_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_cloud();
    let rt = runtime();
    let os = rt.block_on(client(API_CLOUD));

    let c = Cluster::new("t-flavor", |p| {
        p.replace("flavor = \"g1.a100\"", "flavor = \"g1.a10\"")
    });
    let out = c.run(&["up", c.profile(), "--infra-only"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("flavor `g1.a10`") && err.contains("did you mean `g1.a100`"),
        "{err}"
    );
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());

    let c = Cluster::new("t-image", |p| {
        p.replace(
            "debian-12-genericcloud-amd64",
            "debian-13-genericcloud-amd64",
        )
    });
    let out = c.run(&["up", c.profile(), "--infra-only"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("image `debian-13-genericcloud-amd64`"));
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());

    // A dataset from a container the object store does not have.
    let c = Cluster::new("t-container", |p| {
        p + "\n[[data]]\nobject_store = \"no-such-container/train\"\n"
    });
    let out = c.run(&["up", c.profile(), "--infra-only"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("container `no-such-container`: not found in this project's object store"),
        "{err}"
    );
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());

    // As admin, lower the user's instance quota below what the profile needs.
    let admin = rt.block_on(client("local-admin"));
    let project = os.project_id().to_string();
    let before = rt.block_on(admin.compute().quota_usage(&project)).unwrap();
    let old_limit = before.get("instances").map(|q| q.limit).unwrap();
    let in_use = before.get("instances").map(|q| q.in_use).unwrap();
    rt.block_on(
        admin
            .compute()
            .set_quota(&project, &[("instances".to_string(), in_use + 2)].into()),
    )
    .unwrap();
    let c = Cluster::new("t-quota", |p| p);
    let out = c.run(&["up", c.profile(), "--infra-only"]);
    rt.block_on(
        admin
            .compute()
            .set_quota(&project, &[("instances".to_string(), old_limit)].into()),
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("instances: needs 4 more") && err.contains("nothing was created"),
        "{err}"
    );
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());
}

/// The servers of a cluster as its user sees them: (name, id, status, task).
fn servers(
    rt: &tokio::runtime::Runtime,
    os: &hvd_cluster::openstack::OpenStack,
    c: &Cluster,
) -> Vec<(String, String, String, Option<String>)> {
    let filter = hvd_cluster::openstack::ServerFilter {
        tags: vec![hvd_cluster::provider::openstack::tag(&c.name)],
        name: None,
    };
    let mut found: Vec<_> = rt
        .block_on(os.compute().list_servers(&filter))
        .unwrap()
        .into_iter()
        .map(|s| {
            let status = match &s.status {
                hvd_cluster::openstack::ServerStatus::Other(o) => o.clone(),
                other => format!("{other:?}"),
            };
            (s.name.unwrap_or_default(), s.id, status, s.task_state)
        })
        .collect();
    found.sort();
    found
}

/// `stop` shelves every server (workers first, the master last) and the cloud offloads them:
/// Placement holds nothing for them, and `stop` says what it handed back (the workers'
/// GPUs included). Interrupted, the next `stop` finishes; `plan` keeps the stopped cluster
/// whole; `up` (here `--infra-only`: the fake driver's servers boot nothing) starts the same
/// servers again, with their addresses, also after an interrupted start; `down` of a stopped
/// cluster leaves nothing, snapshots included.
#[test]
fn stop_hands_everything_back_and_up_brings_the_same_servers_back() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_cloud();
    let rt = runtime();
    let os = rt.block_on(client(API_CLOUD));
    let admin = rt.block_on(client("local-admin"));
    let c = Cluster::new("t-stop", |p| p.replace("count = 3", "count = 2"));
    assert!(c.run(&["up", c.profile(), "--infra-only"]).status.success());
    let before = c.status_json();
    let addresses = |status: &serde_json::Value| -> Vec<String> {
        status["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| format!("{} {} {}", n["name"], n["private_ip"], n["public_ip"]))
            .collect()
    };
    let running = servers(&rt, &os, &c);
    assert_eq!(running.len(), 3);
    for (name, id, _, _) in &running {
        let held = rt.block_on(allocations(&admin, id));
        assert!(
            held.as_object().is_some_and(|a| !a.is_empty()),
            "{name} holds resources while it runs: {held}"
        );
    }

    // Interrupted once its workers are stopped (the master still running or shelving).
    interrupt(
        &c,
        &["stop", c.profile()],
        "-INT",
        &format!("stopped {}-worker-1", c.name),
    );
    let stop = c.run(&["stop", c.profile(), "--json"]);
    assert!(stop.status.success());
    let report: serde_json::Value = serde_json::from_slice(&stop.stdout).expect("stop --json");
    assert_eq!(report["already"].as_array().unwrap().len(), 2, "{report}");
    assert_eq!(
        report["stopped"][0],
        format!("{}-master", c.name),
        "{report}"
    );

    let stopped = servers(&rt, &os, &c);
    for (name, id, status, task) in &stopped {
        assert_eq!(
            (status.as_str(), task),
            ("ShelvedOffloaded", &None),
            "{name}"
        );
        assert_eq!(
            rt.block_on(allocations(&admin, id)),
            serde_json::json!({}),
            "{name}: Placement holds nothing for a stopped server"
        );
    }
    let status = c.status_json();
    assert_eq!(status["state"], "stopped", "{status:#}");
    assert_eq!(
        addresses(&status),
        addresses(&before),
        "ports and the floating IP are kept"
    );
    let plan = c.run(&["plan", c.profile()]);
    assert_eq!(
        plan.status.code(),
        Some(0),
        "a stopped cluster is kept whole"
    );

    // A stop from the start hands back what the servers held, GPUs included.
    let again = c.run(&["stop", c.profile(), "--json"]);
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["stopped"].as_array().unwrap().len(), 0, "{again}");
    assert!(c.run(&["up", c.profile(), "--infra-only"]).status.success());
    let stop = c.run(&["stop", c.profile(), "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&stop.stdout).unwrap();
    assert_eq!(report["freed"]["servers"], 3, "{report}");
    assert_eq!(
        report["freed"]["gpus"], 2,
        "one per g1.a100 worker: {report}"
    );
    assert!(report["freed"]["vcpus"].as_u64().unwrap() >= 16, "{report}");
    assert!(
        report["freed"]["ram_mib"].as_u64().unwrap() >= 2 * 65536,
        "{report}"
    );

    // Interrupted while it starts the master; the next `up` starts the rest.
    interrupt_up(&c, "-INT", &format!("started {}-master", c.name));
    let up = c.run(&["up", c.profile(), "--infra-only"]);
    assert!(up.status.success());
    assert_complete(&c, 2);
    let started = servers(&rt, &os, &c);
    let ids = |s: &[(String, String, String, Option<String>)]| -> Vec<String> {
        s.iter().map(|x| x.1.clone()).collect()
    };
    assert_eq!(
        ids(&started),
        ids(&running),
        "the same servers, none replaced"
    );
    assert_eq!(addresses(&c.status_json()), addresses(&before));

    // `down` of a stopped cluster.
    assert!(c.run(&["stop", c.profile()]).status.success());
    assert!(c.run(&["down", "--yes", c.profile()]).status.success());
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());
}

/// The root volumes of a cluster's servers, as Nova lists them: server name -> (volume id,
/// deleted with the server).
fn root_volumes(
    rt: &tokio::runtime::Runtime,
    os: &hvd_cluster::openstack::OpenStack,
    c: &Cluster,
) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for (name, id, _, _) in servers(rt, os, c) {
        let server = rt.block_on(os.compute().get_server(&id)).unwrap().unwrap();
        assert_eq!(
            server.image_id, None,
            "{name} is volume-backed: no image of its own"
        );
        for v in server.volumes_attached {
            out.push((name.clone(), v.id, v.delete_on_termination));
        }
    }
    out
}

/// Servers that boot from a volume: a master on a flavor without a root disk
/// (Nova refuses an image-backed server there, for a non-admin user) gets a volume sized
/// for the image and Docker, said in one line; workers get the `root_volume_gb` and
/// `volume_type` of the profile. `plan` shows each server's disk and the quota check counts
/// the volumes (exit 3 before anything is made); `stop` shelves them with no snapshot and
/// `up` brings the same servers back on the same volumes; a root volume that outlived its
/// server is found by its mark and deleted by `down`, also with the state folder lost, and a
/// marked volume of another cluster is left alone.
///
/// STAND-IN: the test cloud's Cinder backend keeps no bytes (tests/cloud/dockervirt's
/// volume.py) and the fake-driver servers read no disk; the API path is real.
#[test]
fn servers_boot_from_volumes_on_a_zero_disk_flavor() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_cloud();
    let rt = runtime();
    let os = rt.block_on(client(API_CLOUD));
    let admin = rt.block_on(client("local-admin"));
    let c = Cluster::new("t-bfv", |p| {
        p.replace("flavor = \"m1.small\"", "flavor = \"m1.nodisk\"")
            .replace(
                "count = 3",
                "count = 2\nroot_volume_gb = 25\nvolume_type = \"standard\"",
            )
    });

    let plan = c.run(&["plan", c.profile()]);
    assert_eq!(plan.status.code(), Some(10), "a plan with changes");
    let said = String::from_utf8_lossy(&plan.stderr);
    // Its size: the system's 10 GB and room for Docker, which depends on whether this
    // machine has the container image yet (30 GB when it does not).
    let master_gb: u64 = said
        .split("the master boots from a new ")
        .nth(1)
        .and_then(|rest| rest.split(" GB volume").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no volume for the zero-disk master: {said}"));
    assert!((15..=40).contains(&master_gb), "{said}");
    assert!(
        said.contains("flavor `m1.nodisk` has no root disk")
            && said.contains("set [master] root_volume_gb to choose"),
        "{said}"
    );
    let shown = String::from_utf8_lossy(&plan.stdout);
    let line = |server: &str| {
        shown
            .lines()
            .find(|l| l.contains(&format!("server             {}-{server}", c.name)))
            .unwrap_or_else(|| panic!("no line for {server}: {shown}"))
            .to_string()
    };
    assert!(
        line("master").ends_with(&format!("(boots from a {master_gb} GB volume)")),
        "{shown}"
    );
    assert!(
        line("worker-1").ends_with("(boots from a 25 GB volume of type standard)"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "disks:\n  master (m1.nodisk): boots from a {master_gb} GB volume\n  workers (g1.a100): boots from a 25 GB volume of type standard\n"
        )),
        "{shown}"
    );

    // Over the project's volume gigabytes: refused before anything is made.
    let project = os.project_id().to_string();
    let usage = rt.block_on(os.volume().quota_usage(&project)).unwrap();
    let gigabytes = usage.get("gigabytes").map(|q| q.limit).unwrap();
    let used = usage.get("gigabytes").map(|q| q.in_use).unwrap();
    rt.block_on(
        admin
            .volume()
            .set_quota(&project, &[("gigabytes".to_string(), used + 60)].into()),
    )
    .unwrap();
    let refused = c.run(&["up", c.profile(), "--infra-only"]);
    rt.block_on(
        admin
            .volume()
            .set_quota(&project, &[("gigabytes".to_string(), gigabytes)].into()),
    )
    .unwrap();
    assert_eq!(refused.status.code(), Some(3));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&format!("volume_gigabytes: needs {} more", master_gb + 50))
            && err.contains("nothing was created"),
        "{err}"
    );
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());

    assert!(c.run(&["up", c.profile(), "--infra-only"]).status.success());
    assert_complete(&c, 2);
    let roots = root_volumes(&rt, &os, &c);
    assert_eq!(roots.len(), 3, "{roots:?}");
    for (server, id, with_server) in &roots {
        assert!(with_server, "{server}: its root volume goes with it");
        let v = rt.block_on(os.volume().get_volume(id)).unwrap().unwrap();
        let want = if server.ends_with("-master") {
            master_gb
        } else {
            25
        };
        assert_eq!((v.size, v.status.as_str()), (want, "in-use"), "{server}");
        assert_eq!(v.volume_type.as_deref(), Some("standard"), "{server}");
    }

    // stop shelves volume-backed servers with no snapshot; up brings the same ones back.
    assert!(c.run(&["stop", c.profile()]).status.success());
    let stopped = servers(&rt, &os, &c);
    assert!(
        stopped.iter().all(|s| s.2 == "ShelvedOffloaded"),
        "{stopped:?}"
    );
    for (name, _, _, _) in &stopped {
        let shelved = rt
            .block_on(os.image().list_by_name(&format!("{name}-shelved")))
            .unwrap();
        assert!(
            shelved.is_empty(),
            "{name}: no snapshot of a volume-backed server"
        );
    }
    assert!(c.run(&["up", c.profile(), "--infra-only"]).status.success());
    assert_eq!(root_volumes(&rt, &os, &c), roots, "the same volumes");

    // A root volume that outlived its server (Nova's delete of it failed), marked as `down`
    // marks them, and another cluster's: `down` without the state folder takes only ours.
    let mark = |cluster: &str, server: &str| hvd_cluster::openstack::VolumeCreate {
        name: String::new(),
        size: 1,
        metadata: [
            ("hvd-cluster".to_string(), cluster.to_string()),
            ("hvd-root-of".to_string(), format!("{cluster}-{server}")),
        ]
        .into(),
        ..Default::default()
    };
    let other = format!("{}-other", c.name);
    let ours = rt
        .block_on(os.volume().create_volume(&mark(&c.name, "worker-9")))
        .unwrap();
    let theirs = rt
        .block_on(os.volume().create_volume(&mark(&other, "worker-1")))
        .unwrap();
    let available = |id: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let v = rt.block_on(os.volume().get_volume(id)).unwrap().unwrap();
            if v.status == "available" {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("volume {id} not available after 60s");
    };
    available(&ours.id);
    available(&theirs.id);
    let plan = c.run(&["plan", c.profile()]);
    assert!(
        String::from_utf8_lossy(&plan.stdout).contains(&format!(
            "- delete  volume             {}-worker-9-root",
            c.name
        )),
        "up would delete it too"
    );
    std::fs::remove_dir_all(c.state.path().join(&c.name)).unwrap();
    let down = c.run(&["down", "--yes", "--cluster", &c.name, "--cloud", API_CLOUD]);
    assert!(down.status.success());
    assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());
    for (server, id, _) in &roots {
        assert_eq!(
            rt.block_on(os.volume().get_volume(id)).unwrap(),
            None,
            "{server}'s root volume"
        );
    }
    assert!(rt
        .block_on(os.volume().get_volume(&ours.id))
        .unwrap()
        .is_none());
    let kept = rt.block_on(os.volume().get_volume(&theirs.id)).unwrap();
    assert!(kept.is_some(), "another cluster's volume is left alone");
    rt.block_on(os.volume().delete_volume(&theirs.id)).unwrap();
}

/// The credential autostop leaves on a master, as Keystone and the services' own
/// keystonemiddleware treat it (tests/cloud/start sets `service_type` in every service, as
/// OpenStack documents for access rules): made for cluster A's servers, it reads and shelves
/// them, and is refused (401) for cluster B's server, for A's network, for creating a server
/// and for listing flavors. A new generation replaces the old one (which then cannot log in),
/// and `down` deletes A's credentials and the rules they leave, not B's.
#[test]
fn the_autostop_credential_stops_its_own_cluster_and_nothing_else() {
    use hvd_cluster::openstack::shelve::ShelveAction;
    use hvd_cluster::openstack::{OpenStack, Query, Request, Service};
    use hvd_cluster::provider::openstack::credential::{
        existing, make_stop_credential, probe, Enforcement,
    };

    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_cloud();
    let rt = runtime();
    let os = rt.block_on(client(API_CLOUD));
    let a = Cluster::new("t-cred", |p| p.replace("count = 3", "count = 1"));
    let b = Cluster::new("t-othr", |p| p.replace("count = 3", "count = 1"));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(a.run(&["up", a.profile(), "--infra-only"]).status.success());
        assert!(b.run(&["up", b.profile(), "--infra-only"]).status.success());
        // (name, id, ...) by name: the master first
        let (a_servers, b_servers) = (servers(&rt, &os, &a), servers(&rt, &os, &b));
        let a_ids: Vec<String> = a_servers.iter().map(|s| s.1.clone()).collect();
        let b_ids: Vec<String> = b_servers.iter().map(|s| s.1.clone()).collect();
        assert_eq!((a_ids.len(), b_ids.len()), (2, 2));
        let (a_master, a_worker) = (a_ids[0].clone(), a_ids[1].clone());
        assert!(a_servers[0].0.ends_with("-master"));

        let cred = rt
            .block_on(make_stop_credential(&os, &a.name, &a_ids))
            .expect("make the credential");
        assert_eq!(cred.generation, 1);
        assert_eq!(cred.rules.len(), 5, "{:?}", cred.rules);
        assert_eq!(
            rt.block_on(probe(os.config(), &cred, &a_master)).unwrap(),
            Enforcement::Enforced
        );
        let b_cred = rt
            .block_on(make_stop_credential(&os, &b.name, &b_ids))
            .expect("B's credential");

        let as_cred = rt
            .block_on(OpenStack::connect(&cred.cloud(os.config())))
            .expect("the credential logs in");
        let refused = |req: Request, what: &str| {
            let got = rt.block_on(as_cred.request(&req));
            assert_eq!(
                got.as_ref().err().and_then(|e| e.status()),
                Some(401),
                "{what} must be refused: {got:?}"
            );
        };
        assert!(rt
            .block_on(as_cred.compute().get_server(&a_master))
            .unwrap()
            .is_some());
        refused(
            Request::get(Service::Compute, format!("servers/{}", b_ids[0])),
            "reading another cluster's server",
        );
        refused(
            Request::post(
                Service::Compute,
                format!("servers/{}/action", b_ids[0]),
                ShelveAction::Shelve.body(),
            ),
            "shelving another cluster's server",
        );
        refused(
            Request::post(
                Service::Compute,
                "servers",
                serde_json::json!({"server": {}}),
            ),
            "creating a server",
        );
        refused(Request::get(Service::Compute, "flavors"), "listing flavors");
        // One metadata key of the master (where the agent says what it decided), no other.
        let meta = |server: &str, key: &str| {
            Request::put(
                Service::Compute,
                format!("servers/{server}/metadata/{key}"),
                serde_json::json!({"meta": {key: "idle since 2026-11-25T16:00:00Z"}}),
            )
        };
        rt.block_on(as_cred.request(&meta(&a_master, "hvd-cluster-autostop")))
            .expect("the agent may publish its state on its master");
        refused(
            meta(&a_master, "hvd-cluster"),
            "changing the metadata that marks the cluster",
        );
        refused(
            meta(&a_worker, "hvd-cluster-autostop"),
            "publishing on a worker",
        );
        let tag = hvd_cluster::provider::openstack::tag(&a.name);
        let network = rt
            .block_on(
                os.network()
                    .list_networks(&Query::new().tags(&[tag.as_str()])),
            )
            .unwrap();
        assert_eq!(network.len(), 1);
        refused(
            Request::delete(Service::Network, format!("networks/{}", network[0].id)),
            "deleting the cluster's network",
        );
        assert_eq!(
            rt.block_on(
                os.network()
                    .list_networks(&Query::new().tags(&[tag.as_str()]))
            )
            .unwrap()
            .len(),
            1,
            "the network is still there"
        );

        // What it is for: shelving its own servers, watched with the same credential.
        rt.block_on(
            as_cred
                .compute()
                .shelve_action(&a_worker, ShelveAction::Shelve),
        )
        .expect("the credential shelves its own worker");
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let s = rt
                .block_on(as_cred.compute().get_server(&a_worker))
                .unwrap()
                .unwrap();
            if s.status == hvd_cluster::openstack::ServerStatus::ShelvedOffloaded
                && s.task_state.is_none()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "still {:?}/{:?}",
                s.status,
                s.task_state
            );
            std::thread::sleep(Duration::from_secs(3));
        }

        // A new generation (after `scale`/`heal`) replaces the old one, which stops working.
        let second = rt
            .block_on(make_stop_credential(&os, &a.name, &a_ids))
            .unwrap();
        assert_eq!(second.generation, 2);
        assert_eq!(
            rt.block_on(existing(&os, &a.name))
                .unwrap()
                .into_iter()
                .map(|(g, _)| g)
                .collect::<Vec<_>>(),
            [2]
        );
        let old = rt.block_on(OpenStack::connect(&cred.cloud(os.config())));
        assert!(old.is_err(), "the old credential is gone");

        // `down` deletes A's credential and the rules naming A's servers, and leaves B's.
        let down = a.run(&["down", "--yes", a.profile()]);
        assert!(down.status.success());
        assert!(
            String::from_utf8_lossy(&down.stderr).contains("deleted 1 autostop credential"),
            "down says it deleted the credential"
        );
        assert!(rt.block_on(existing(&os, &a.name)).unwrap().is_empty());
        let user = rt.block_on(os.user_id()).unwrap();
        let rules = rt.block_on(os.identity().access_rules(&user)).unwrap();
        assert!(
            !rules
                .iter()
                .any(|r| a_ids.iter().any(|id| r.path.contains(id.as_str()))),
            "{rules:?}"
        );
        assert!(
            rules.iter().any(|r| r.path.contains(b_ids[0].as_str())),
            "B's rules stay with B's credential: {rules:?}"
        );
        assert_eq!(
            rt.block_on(existing(&os, &b.name)).unwrap().len(),
            1,
            "B keeps its credential {}",
            b_cred.name
        );
    }));
    for c in [&a, &b] {
        let _ = c.run(&["down", "--yes", c.profile()]);
        assert_eq!(rt.block_on(leftovers(&os, &c.name)), Vec::<String>::new());
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
