//! `container.source = "pull"` from a private registry, end to end on one local cluster
//! (master + 1 worker, `collective = "mpi"`) and a real registry: Debian's docker-registry over TLS (a CA of its
//! own, named by `container.registry_ca`) with basic auth, started by `tests/registry/start`,
//! which pushes the stand-in for the public horovod/horovod images into it (standins/: Debian's
//! PyTorch and Horovod from PyPI, openssh-server installed but not running, a shell as its
//! command, nothing of ours inside): the tool brings the image's runtime from outside.
//! In order, on the same cluster:
//! - a credential helper that is missing, fails or answers garbage: one line naming it, the
//!   secret in no output, nothing made;
//! - wrong credentials: one clear line, the password in no output;
//! - a tag the registry does not have (the credentials from a credential helper the Docker
//!   config names for the registry, `credHelpers`): one clear line;
//! - the user's Docker config (as `docker login` leaves it): the master pulls once, the
//!   worker gets the master's copy over the private network, the check passes under Open MPI
//!   (mpirun's orted on the worker started through the tool's sshd); the registry
//!   sent about one copy of the image; a terminal of the Jupyter the tool installed into the
//!   image's Python runs horovodrun across both nodes;
//! - the password is nowhere: outputs, `status --json`, the cluster's folder, the nodes' files;
//! - `up` again (the credentials from the config's `credsStore` helper) pulls nothing; `down`
//!   leaves nothing.
//!
//! The helpers are small scripts speaking Docker's credential-helper protocol, found on PATH
//! as the users' own (desktop, pass, ecr-login) are.
//!
//! Needs Docker and the images (scripts/test builds them first).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::jupyter::{horovodrun_in_terminal, jupyter_url};
use common::registry::{Registry, OUR_IMAGE, STAND_IN};
use common::TestCluster;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p)
                .map(|b| String::from_utf8_lossy(&b).contains(needle))
                .unwrap_or(false)
            {
                found.push(p);
            }
        }
    }
    found
}

/// A Docker config (`config.json` in its own folder) and a PATH whose first folder holds
/// `docker-credential-NAME`: a small script speaking the credential-helper protocol as the
/// users' helpers do (`get`, the server URL on stdin, the JSON answer on stdout), whose
/// `answer` is a shell snippet. It notes its arguments and stdin in `helper.log`.
struct Helper {
    config_dir: PathBuf,
    path: String,
    log: PathBuf,
}

fn helper(dir: &Path, config_json: &str, name: &str, answer: &str) -> Helper {
    let config_dir = dir.join(format!("config-{name}"));
    let bin = dir.join(format!("bin-{name}"));
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(config_dir.join("config.json"), config_json).unwrap();
    let log = dir.join(format!("helper-{name}.log"));
    let script = bin.join(format!("docker-credential-{name}"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nread -r server\necho \"$* $server\" >> '{}'\n{answer}\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Helper {
        config_dir,
        path,
        log,
    }
}

#[test]
fn pull_from_a_private_registry_once_per_cluster() {
    let registry = Registry::start();
    let image = registry.image(STAND_IN);
    let ca = registry.state.join("ca.crt");
    let c = TestCluster::new("local.toml", "t-pull", |p| {
        p.replace("count = 2", "count = 1")
            .replace(
                &format!("image = \"{OUR_IMAGE}\""),
                &format!(
                    "image = \"{image}\"\nregistry_ca = \"{}\"\ncollective = \"mpi\"",
                    ca.display()
                ),
            )
            .replace("source = \"build\"", "source = \"pull\"")
    });
    let (name, profile) = (c.name.clone(), c.profile.clone());
    let empty_config = tempfile::tempdir().expect("a temp dir");
    let up_with = |env: &[(&str, &str)]| -> Output {
        let started = std::time::Instant::now();
        let mut cmd = c.command(&["up", &profile]);
        // no Docker config of this machine's user leaks in
        cmd.env("DOCKER_CONFIG", empty_config.path())
            .env_remove("HVD_CLUSTER_REGISTRY_USER")
            .env_remove("HVD_CLUSTER_REGISTRY_PASSWORD");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run hvd-cluster up");
        eprintln!(
            "$ hvd-cluster up ({:?})\n--- exit {:?} after {:.0}s\n{}",
            env.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            out.status.code(),
            started.elapsed().as_secs_f64(),
            text(&out)
        );
        out
    };
    let mut outputs = Vec::new();
    let helpers = tempfile::tempdir().expect("a temp dir");
    let answer = format!(
        "printf '{{\"ServerURL\":\"%s\",\"Username\":\"hvd-test\",\"Secret\":\"%s\"}}' \"$server\" '{}'",
        registry.password
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // A credential helper that is missing, fails or answers garbage: one line naming it,
        // exit 2, nothing made (no node container).
        let reg = &registry.address;
        let cases = [
            (
                helper(helpers.path(), r#"{"credsStore":"hvdmissing"}"#, "hvdunused", "exit 0"),
                "the credential helper `docker-credential-hvdmissing` is not on PATH".to_string(),
            ),
            (
                helper(
                    helpers.path(),
                    &format!(r#"{{"credHelpers":{{"{reg}":"hvdfail"}}}}"#),
                    "hvdfail",
                    &format!("echo 'keychain locked; {}'; exit 3", registry.password),
                ),
                "the credential helper `docker-credential-hvdfail` failed (exit status: 3)".to_string(),
            ),
            (
                helper(
                    helpers.path(),
                    r#"{"credsStore":"hvdgarbage"}"#,
                    "hvdgarbage",
                    &format!("echo 'Secret={}'", registry.password),
                ),
                "`docker-credential-hvdgarbage` answered something that is not the helper protocol's JSON".to_string(),
            ),
        ];
        for (h, expected) in &cases {
            let out = up_with(&[
                ("DOCKER_CONFIG", h.config_dir.to_str().unwrap()),
                ("PATH", &h.path),
            ]);
            let said = text(&out);
            assert_eq!(out.status.code(), Some(2), "{said}");
            assert!(said.contains(expected.as_str()), "{said}");
            assert!(
                !said.contains(&registry.password),
                "the secret was shown:\n{said}"
            );
            let made = Command::new("docker")
                .args(["ps", "-aq", "--filter", &format!("name={name}-")])
                .output()
                .expect("docker ps");
            assert!(made.stdout.is_empty(), "a node was made: {made:?}");
            outputs.push(out);
        }

        // Wrong credentials: one clear line naming the registry, exit 1, no restart loop.
        let wrong = "wrong-password-0123456789";
        let out = up_with(&[
            ("HVD_CLUSTER_REGISTRY_USER", "hvd-test"),
            ("HVD_CLUSTER_REGISTRY_PASSWORD", wrong),
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let said = text(&out);
        assert!(
            said.contains(&format!(
                "the registry {} refused the credentials for {image}",
                registry.address
            )),
            "{said}"
        );
        assert!(!said.contains(wrong), "the password was shown:\n{said}");
        outputs.push(out);

        // A tag the registry does not have.
        let missing = format!(
            "{}:no-such-tag",
            image.rsplit_once(':').map_or(&*image, |x| x.0)
        );
        let edited = std::fs::read_to_string(&profile)
            .expect("the profile")
            .replace(&image, &missing);
        std::fs::write(&profile, &edited).expect("write the profile");
        // The credentials from a credential helper for this registry (`credHelpers`): the
        // registry accepts them and answers that it has no such tag.
        let h = helper(
            helpers.path(),
            &format!(r#"{{"credHelpers":{{"{reg}":"hvdtest"}},"auths":{{"{reg}":{{}}}}}}"#),
            "hvdtest",
            &answer,
        );
        let out = up_with(&[
            ("DOCKER_CONFIG", h.config_dir.to_str().unwrap()),
            ("PATH", &h.path),
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let asked = std::fs::read_to_string(&h.log).expect("the helper was run");
        assert_eq!(
            asked.trim(),
            format!("get {reg}"),
            "what the helper was given"
        );
        assert!(
            text(&out).contains(&format!(
                "the registry {} has no image {missing}",
                registry.address
            )),
            "{}",
            text(&out)
        );
        outputs.push(out);
        std::fs::write(&profile, edited.replace(&missing, &image)).expect("write the profile");

        // The user's Docker config, as `docker login` leaves it: both nodes pull at once from
        // the master's mirror, which takes each blob from the registry once.
        let before = registry.blob_bytes_sent(STAND_IN);
        let mark = registry.log_mark("registry.log");
        let docker_config = registry.state.join("docker");
        let mut cmd = c.command(&["up", &profile]);
        cmd.env("DOCKER_CONFIG", &docker_config)
            .env_remove("HVD_CLUSTER_REGISTRY_USER")
            .env_remove("HVD_CLUSTER_REGISTRY_PASSWORD");
        let started = std::time::Instant::now();
        let out = cmd.output().expect("run hvd-cluster up");
        let secs = started.elapsed().as_secs_f64();
        let said = text(&out);
        eprintln!("$ hvd-cluster up (DOCKER_CONFIG)\n--- after {secs:.0}s\n{said}");
        assert!(out.status.success(), "{said}");
        for node in ["master", "worker-1"] {
            assert!(
                said.contains(&format!(
                    "{name}-{node}: pulled {image} through the master's mirror in"
                )),
                "{said}"
            );
        }
        assert!(
            said.contains("blob request(s) to 2 node(s) and took ")
                && said.contains("from the registry (each once)"),
            "{said}"
        );
        // The registry's own log: every blob sent once, and only to the master.
        let gets = registry.blob_gets_since("registry.log", STAND_IN, mark);
        let master_ip = common::private_ip(&c, "master");
        registry.assert_each_layer_once_to(STAND_IN, &gets, &master_ip);
        assert!(
            said.contains(&format!(
                "2 rank(s) joined on {name}-master, {name}-worker-1"
            )),
            "{said}"
        );
        // Open MPI in an image not ours: mpirun's remote orted started through the sshd the
        // tool brought into it, on every rank.
        assert!(said.contains("controller: mpi on every rank"), "{said}");
        registry.assert_sent_one_copy(STAND_IN, before);
        // The image's Jupyter was installed by the tool; its terminal runs horovodrun.
        assert!(
            said.contains("the image has no Jupyter Lab: installed it from PyPI"),
            "{said}"
        );
        horovodrun_in_terminal(&c, &jupyter_url(&out), 2);
        outputs.push(out);

        // The password is nowhere: outputs, status --json, the cluster's folder, the nodes.
        let status = c.hvd(&["status", &profile, "--json"]);
        outputs.push(status);
        for out in &outputs {
            assert!(!text(out).contains(&registry.password), "{}", text(out));
        }
        let leaked = files_holding(&c.state, &registry.password);
        assert!(leaked.is_empty(), "the password is in {leaked:?}");
        for node in [format!("{name}-master"), format!("{name}-worker-1")] {
            let out = Command::new("docker")
                .args(["exec", &node, "sh", "-c"])
                .arg(format!(
                    "ls -d /run/hvd-cluster-pull.* /run/hvd-cluster-mirror-access.* /var/tmp/hvd-cluster-mirror 2>/dev/null; pgrep -af 'image_mirro[r].py'; grep -rlsF -- {} /etc /run /root /home /var/tmp /tmp; true",
                    registry.password
                ))
                .output()
                .expect("docker exec");
            let found = String::from_utf8_lossy(&out.stdout);
            assert!(found.trim().is_empty(), "{node} keeps: {found}");
        }

        // Again, the credentials kept by the config's `credsStore`: nothing pulled, nothing
        // sent.
        let before = registry.blob_bytes_sent(STAND_IN);
        let h = helper(
            helpers.path(),
            r#"{"credsStore":"hvdstore"}"#,
            "hvdstore",
            &answer,
        );
        let mut cmd = c.command(&["up", &profile]);
        cmd.env("DOCKER_CONFIG", &h.config_dir)
            .env("PATH", &h.path)
            .env_remove("HVD_CLUSTER_REGISTRY_USER")
            .env_remove("HVD_CLUSTER_REGISTRY_PASSWORD");
        let out = cmd.output().expect("run hvd-cluster up");
        let asked = std::fs::read_to_string(&h.log).expect("the helper was run");
        assert_eq!(
            asked.trim(),
            format!("get {reg}"),
            "what the helper was given"
        );
        assert!(out.status.success(), "{}", text(&out));
        assert!(!text(&out).contains("pulled"), "{}", text(&out));
        assert_eq!(
            registry.blob_bytes_sent(STAND_IN),
            before,
            "a second up pulls nothing"
        );
    }));
    let down = c.hvd(&["down", "--yes", &profile]);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(down.status.success(), "down succeeds");
}
