//! The local provider's bake, through the provider's own calls on this machine's
//! Docker: a node container committed as `hvd-cluster/bake:NAME` with the bake's properties as
//! labels and without the login key its environment carried, its Docker data volume copied to
//! `hvd-bake-NAME-docker`; the bake found by its key, listed, its name taken; a node made from
//! it (the profile's `image`) starts from that image with its Docker volume seeded from the
//! copy; a bake whose volume is gone (cut short) is no bake; the deletion removes both.
//!
//! A stand-in: a plain Debian container with the cluster's label and a node's name is the node
//! baked (no sshd, no Docker inside: the node's side of a bake, `templates/node/bake.sh`, runs
//! on the real-host servers of tests/cloud_hosts.rs; the whole `up`, `bake`, `up` from the bake
//! and `scale` on the local provider is `cargo bench --bench bake`, run by hand). Takes seconds.
//!
//! And `bake --temporary` whole, through the command: a one-node cluster of its own brought up
//! from the stock node image, interrupted, finished by the same command again, baked and
//! deleted (a local `up` of one node: a minute or two).
//! Needs Docker and the images (`scripts/build-images`).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::docker_text as docker;
use common::TestCluster;
use hvd_cluster::bake::BakeInputs;
use hvd_cluster::plan::Names;
use hvd_cluster::provider::local::{LocalProvider, LABEL};
use hvd_cluster::provider::Provider;

const IMAGE: &str = "hvd-cluster/debian:bookworm";

/// Everything of the cluster's (by its label) and the bake's, however the test ends.
struct Cleanup {
    cluster: String,
    bake: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let label = format!("label={LABEL}={}", self.cluster);
        for kind in ["container", "volume", "network"] {
            let all = if kind == "container" { "-aq" } else { "-q" };
            let ids = docker(&[kind, "ls", all, "--filter", &label]).unwrap_or_default();
            for id in ids.split_whitespace() {
                let _ = match kind {
                    "container" => docker(&["rm", "-f", "-v", id]),
                    other => docker(&[other, "rm", "-f", id]),
                };
            }
        }
        let _ = docker(&[
            "image",
            "rm",
            "-f",
            &format!("hvd-cluster/bake:{}", self.bake),
        ]);
        let _ = docker(&[
            "volume",
            "rm",
            "-f",
            &format!("hvd-bake-{}-docker", self.bake),
        ]);
        let _ = docker(&[
            "volume",
            "rm",
            "-f",
            &format!("{}-worker-1-docker", self.cluster),
        ]);
    }
}

#[test]
fn a_local_bake_is_a_committed_node_and_its_docker_data_and_nodes_start_from_both() {
    docker(&["image", "inspect", IMAGE]).expect("the images: run scripts/build-images");
    let cluster = format!("lbk-{}", std::process::id());
    let bake = format!("{cluster}-bake");
    let _cleanup = Cleanup {
        cluster: cluster.clone(),
        bake: bake.clone(),
    };
    let names = Names(&cluster);
    let node = names.worker(1);
    let label = format!("{LABEL}={cluster}");
    let login_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBakedLoginKeyOfTheOldCluster test";
    // the stand-in node, its Docker data volume holding "an image"
    let node_volume = format!("{node}-docker");
    docker(&["volume", "create", "--label", &label, &node_volume]).unwrap();
    docker(&[
        "run",
        "-d",
        "--init",
        "--name",
        &node,
        "--label",
        &label,
        "-e",
        &format!("SSH_AUTHORIZED_KEYS={login_key}"),
        "-v",
        &format!("{node_volume}:/var/lib/docker"),
        IMAGE,
        "sleep",
        "infinity",
    ])
    .expect("the stand-in node starts");
    docker(&[
        "exec",
        &node,
        "sh",
        "-c",
        "mkdir -p /var/lib/docker/image/overlay2 && echo held > /var/lib/docker/image/overlay2/repositories.json \
         && chown 1000 /var/lib/docker/image && echo installed > /etc/installed-by-bootstrap",
    ])
    .unwrap();

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut provider = rt
        .block_on(LocalProvider::connect())
        .expect("docker answers");
    let inputs = BakeInputs {
        source_image: rt
            .block_on(provider.bake_source(None))
            .expect("the node image"),
        horovod_image_id: "sha256:0123456789abcdef".into(),
        docker_version: "20.10.24".into(),
        gpu_driver: "none".into(),
    };
    assert!(
        inputs
            .source_image
            .starts_with("hvd-cluster/node:bookworm@sha256:"),
        "the node image by tag and id: {}",
        inputs.source_image
    );
    let key = inputs.key();
    let properties: BTreeMap<String, String> = inputs.properties(&cluster, &node);
    assert_eq!(rt.block_on(provider.find_bake(&key)).unwrap(), None);
    assert_eq!(rt.block_on(provider.bake_name_taken(&bake)).unwrap(), None);

    let made = rt
        .block_on(provider.bake(&cluster, &node, &bake, &properties))
        .expect("the bake");
    assert_eq!(made.name, bake);
    assert_eq!(made.node.as_deref(), Some(node.as_str()));
    assert_eq!(made.holds.as_deref(), Some("sha256:0123456789abcdef"));
    // the image: the node's files, the bake's labels, no login key in its environment
    let env = docker(&["image", "inspect", "-f", "{{json .Config.Env}}", &made.id]).unwrap();
    assert!(!env.contains("AAAAC3Nza"), "{env}");
    assert!(env.contains("\"SSH_AUTHORIZED_KEYS=\""), "{env}");
    let labels = docker(&[
        "image",
        "inspect",
        "-f",
        "{{json .Config.Labels}}",
        &made.id,
    ])
    .unwrap();
    assert!(
        labels.contains(&format!("\"hvd_bake_key\":\"{key}\"")),
        "{labels}"
    );
    assert!(
        labels.contains("\"hvd_bake_tool\":\"hvd-cluster "),
        "{labels}"
    );

    // found by its key, listed, its name taken
    let found = rt.block_on(provider.find_bake(&key)).unwrap();
    assert_eq!(
        found.as_ref().map(|b| b.id.as_str()),
        Some(made.id.as_str())
    );
    let listed = rt.block_on(provider.list_bakes()).unwrap();
    assert!(listed.iter().any(|b| b.name == bake), "{listed:?}");
    let taken = rt.block_on(provider.bake_name_taken(&bake)).unwrap();
    assert!(
        taken.is_some_and(|t| t.own_bake && t.what.starts_with("this machine's bake ")),
        "the name is taken"
    );

    // a node of a profile naming the bake: made from its image, its Docker data seeded
    let profile = hvd_cluster::profile::parse(
        std::path::Path::new("t.toml"),
        &format!(
            "name = \"{cluster}\"\nprovider = \"local\"\n[master]\nimage = \"{bake}\"\n[workers]\ncount = 1\n"
        ),
    )
    .expect("the profile");
    rt.block_on(provider.resolve(&profile))
        .expect("the bake resolves");
    assert!(
        provider
            .disks(&profile)
            .iter()
            .any(|l| l.starts_with(&format!("workers: made from the bake `{bake}`"))),
        "{:?}",
        provider.disks(&profile)
    );
    provider.set_public_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINewClusterKey new".into());
    let blueprint = provider.blueprint();
    let ids = BTreeMap::new();
    for fixed in blueprint
        .fixed(&profile)
        .iter()
        .filter(|d| d.name != names.master())
    {
        rt.block_on(provider.create(&cluster, fixed, &ids))
            .expect("the network and /shared's volume");
    }
    let second = blueprint.worker(&profile, 2);
    rt.block_on(provider.create(&cluster, &second, &ids))
        .expect("a node from the bake");
    let new_node = names.worker(2);
    let image_of = docker(&["inspect", "-f", "{{.Image}}", &new_node]).unwrap();
    assert_eq!(image_of, made.id, "made from the bake's image");
    let inside = docker(&[
        "exec",
        &new_node,
        "sh",
        "-c",
        "cat /var/lib/docker/image/overlay2/repositories.json /etc/installed-by-bootstrap; \
         stat -c %u /var/lib/docker/image; printf '%s\\n' \"$SSH_AUTHORIZED_KEYS\"",
    ])
    .unwrap();
    assert_eq!(
        inside.lines().collect::<Vec<_>>(),
        [
            "held",
            "installed",
            "1000",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINewClusterKey new"
        ],
        "the bake's Docker data, its files, the new cluster's key"
    );
    let booted = rt
        .block_on(provider.servers_booted_from(std::slice::from_ref(&made.id)))
        .unwrap();
    assert_eq!(booted[&made.id], std::slice::from_ref(&new_node));

    // a name with no bake is refused, with the bakes there are
    let missing = hvd_cluster::profile::parse(
        std::path::Path::new("t.toml"),
        &format!(
            "name = \"{cluster}\"\nprovider = \"local\"\n[master]\nimage = \"no-such-bake\"\n[workers]\ncount = 0\n"
        ),
    )
    .unwrap();
    let e = rt
        .block_on(provider.resolve(&missing))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("master.image `no-such-bake`") && e.contains(&bake),
        "{e}"
    );

    // a bake whose volume is gone (a bake cut short) is no bake: its image goes
    docker(&["rm", "-f", "-v", &new_node]).unwrap();
    docker(&["volume", "rm", &format!("{new_node}-docker")]).unwrap();
    docker(&["volume", "rm", &format!("hvd-bake-{bake}-docker")]).unwrap();
    assert_eq!(rt.block_on(provider.find_bake(&key)).unwrap(), None);
    assert!(
        docker(&["image", "inspect", &made.id]).is_err(),
        "the image went"
    );

    // made again, then deleted: image and volume
    let again = rt
        .block_on(provider.bake(&cluster, &node, &bake, &properties))
        .expect("the bake again");
    rt.block_on(provider.delete_bake(&again)).expect("deleted");
    assert!(docker(&["image", "inspect", &again.id]).is_err());
    assert!(docker(&["volume", "inspect", &format!("hvd-bake-{bake}-docker")]).is_err());
    assert!(rt
        .block_on(provider.list_bakes())
        .unwrap()
        .iter()
        .all(|b| b.name != bake));
}

/// `bake --temporary`: no cluster of the profile runs; the command says first which cluster it
/// makes and how it goes if cut short, and Ctrl-C during its server's bootstrap leaves that
/// cluster (exit 130); the same command again resumes it, checks it, bakes its server and
/// deletes it: nothing of `NAME-baking` is left (containers, volumes, network, folder), the
/// bake carries `NAME-baking` as its cluster, and no folder of the profile's own cluster was
/// made. (That a bake with the same contents is found, not made again, is the same code as a
/// running cluster's bake, which tests/cloud_hosts.rs checks.)
#[test]
fn a_temporary_cluster_is_made_for_the_bake_and_deleted_after_it() {
    docker(&["image", "inspect", IMAGE]).expect("the images: run scripts/build-images");
    let c = TestCluster::new("local.toml", "t-tmpb", |p| p);
    let temporary = format!("{}-baking", c.name);
    let bake = format!("{}-bake", c.name);
    let _cleanup = Cleanup {
        cluster: temporary.clone(),
        bake: bake.clone(),
    };
    let labelled = |kind: &str| {
        let all = if kind == "container" { "-aq" } else { "-q" };
        docker(&[
            kind,
            "ls",
            all,
            "--filter",
            &format!("label={LABEL}={temporary}"),
        ])
        .unwrap()
    };

    // Without --temporary, no cluster is no node to bake: one line, exit 2, the way out.
    let line = common::one_error_line(&c.hvd(&["bake", &c.profile]), 2);
    assert!(
        line.contains("is not up on this machine") && line.contains("--temporary"),
        "{line}"
    );

    let said = common::interrupt::at_marker(
        c.command(&["bake", &c.profile, "--temporary"]),
        "-INT",
        &format!("{temporary}-master: docker load"),
        Duration::from_secs(900),
    );
    let first = said
        .iter()
        .find(|l| l.contains("on a temporary cluster"))
        .unwrap_or_else(|| panic!("the command says which cluster it makes: {said:?}"));
    assert!(
        first.contains(&format!("`{temporary}`"))
            && first.contains(&format!("down --cluster {temporary}")),
        "{first}"
    );
    assert!(c.state.join(&temporary).join("profile.toml").is_file());
    assert!(
        !labelled("container").is_empty(),
        "the cut-short cluster stays"
    );

    let made = c.hvd(&["bake", &c.profile, "--temporary"]);
    let out = String::from_utf8_lossy(&made.stdout).into_owned();
    let err = String::from_utf8_lossy(&made.stderr).into_owned();
    assert!(made.status.success(), "{err}");
    assert!(
        err.contains(&format!("`{temporary}` is up and passed its check")),
        "{err}"
    );
    assert!(
        out.contains(&format!("bake: {bake} ("))
            && out.contains(&format!("from {temporary}-master in ")),
        "{out}"
    );
    for kind in ["container", "volume", "network"] {
        assert_eq!(labelled(kind), "", "no {kind} of {temporary} left");
    }
    assert!(
        !c.state.join(&temporary).exists(),
        "its folder went with it"
    );
    assert!(
        !c.state.join(&c.name).exists(),
        "the profile's own cluster was never made"
    );
    let labels = docker(&[
        "image",
        "inspect",
        "-f",
        "{{json .Config.Labels}}",
        &format!("hvd-cluster/bake:{bake}"),
    ])
    .unwrap();
    assert!(
        labels.contains(&format!("\"hvd_bake_cluster\":\"{temporary}\"")),
        "{labels}"
    );

    let deleted = c.hvd(&["bake", &c.profile, "--delete", &bake, "--yes"]);
    assert!(deleted.status.success());
}
