//! A user's own image as the cluster's containers (`container.source = "pull"` of an image we
//! do not make), end to end on ONE local cluster (master + 2 workers) of the shipped
//! profiles/local-own-image.toml and the private registry of tests/registry/start. The image is the stand-in for a vendor's framework container
//! (tests/registry/standins/Dockerfile, `like-vendor`: Debian's PyTorch and Horovod from PyPI,
//! no OpenSSH at all, no Jupyter, an entrypoint that prints a banner and runs its arguments, a
//! non-root default user, nothing of ours inside), pulled with the credentials in
//! HVD_CLUSTER_REGISTRY_USER / _PASSWORD (tests/registry_pull.rs covers the Docker config, a
//! refused login, a missing tag and the horovod/horovod-like stand-in). In order:
//! - the profile first names an image that cannot serve (Python, no Horovod): `up` stops at the
//!   container step with one line naming the image and what it lacks, and leaves no container
//!   behind (no restart loop);
//! - the profile fixed (the image through the registry's token door: Bearer auth, as Docker
//!   Hub, GHCR, GitLab and Harbor answer), `up` goes on: the three nodes pull at once from the
//!   master's mirror, each blob crossing from the registry once (its own log says so); the
//!   tool says it installs Jupyter Lab into the image's Python, the check passes with every
//!   rank, the Jupyter URL answers;
//! - a terminal of that Jupyter runs `horovodrun` across every slot (over its websocket, as a
//!   browser does);
//! - examples/pytorch_mnist.py through `run`;
//! - `tensorboard` says in one line that the image has no TensorBoard;
//! - examples/pytorch_elastic.py grows from 2 to 3 workers with `scale`.
//!
//! Needs Docker and the base image (scripts/test builds it first).

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::jupyter::{horovodrun_in_terminal, jupyter_url};
use common::mnist::{assert_mnist_ran_everywhere, run_mnist};
use common::registry::{Registry, NO_HOROVOD, VENDOR_STAND_IN};
use common::{ElasticJob, TestCluster};

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_users_image_runs_the_cluster() {
    let registry = Registry::start();
    let good = registry.image(VENDOR_STAND_IN);
    let bad = registry.image(NO_HOROVOD);
    // The shipped profile (profiles/local-own-image.toml) as a user copies it: its CA path,
    // relative to the profiles folder, made absolute for the copy, and at first an image that
    // cannot serve in place of the one it names.
    let shipped_ca = "registry_ca = \"../tests/registry/state/ca.crt\"";
    let c = TestCluster::new("local-own-image.toml", "t-own", |p| {
        assert!(p.contains(&format!("image = \"{good}\"")), "{p}");
        assert!(p.contains(shipped_ca), "{p}");
        p.replace(
            shipped_ca,
            &format!(
                "registry_ca = \"{}\"",
                registry.state.join("ca.crt").display()
            ),
        )
        .replace(
            &format!("image = \"{good}\""),
            &format!("image = \"{bad}\""),
        )
    });
    let (name, profile) = (c.name.clone(), c.profile.clone());
    let no_docker_config = tempfile::tempdir().expect("a temp dir");
    let up = || -> Output {
        let started = Instant::now();
        let out = c
            .command(&["up", &profile])
            .env("DOCKER_CONFIG", no_docker_config.path())
            .env("HVD_CLUSTER_REGISTRY_USER", "hvd-test")
            .env("HVD_CLUSTER_REGISTRY_PASSWORD", &registry.password)
            .output()
            .expect("run hvd-cluster up");
        eprintln!(
            "$ hvd-cluster up\n--- exit {:?} after {:.0}s\n{}",
            out.status.code(),
            started.elapsed().as_secs_f64(),
            text(&out)
        );
        out
    };
    let started = Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // An image that cannot serve: one line at the container step, no container left.
        let out = up();
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(
            said.contains(&format!(
                "the image {bad} cannot run as the cluster's containers: it has no horovodrun on its PATH"
            )),
            "{said}"
        );
        assert!(!said.contains(&registry.password), "{said}");
        // the runtime was made on every node before the container step found the image unfit
        assert_eq!(said.matches(": runtime applied in").count(), 3, "{said}");
        for node in [format!("{name}-master"), format!("{name}-worker-1")] {
            let left = Command::new("docker")
                .args([
                    "exec",
                    &node,
                    "docker",
                    "ps",
                    "-aq",
                    "--filter",
                    "name=^hvd$",
                ])
                .output()
                .expect("docker exec");
            assert!(
                left.status.success() && left.stdout.is_empty(),
                "{node} keeps a container: {}",
                text(&left)
            );
        }

        // The profile fixed: the same cluster goes on with the user's image.
        // Through the registry's token door (Bearer, as Docker Hub, GHCR, GitLab and Harbor
        // answer): the three nodes pull at once from the master's mirror, which asked the
        // token service and took each blob from the registry once.
        let through_token = registry.token_image(VENDOR_STAND_IN);
        let edited = std::fs::read_to_string(&profile)
            .expect("the profile")
            .replace(&bad, &through_token);
        std::fs::write(&profile, edited).expect("write the profile");
        let mark = registry.log_mark("token-registry.log");
        let tokens_before = registry.log_mark("token-issuer.log");
        let out = up();
        let said = text(&out);
        assert!(out.status.success(), "{said}");
        for node in ["master", "worker-1", "worker-2"] {
            assert!(
                said.contains(&format!(
                    "{name}-{node}: pulled {through_token} through the master's mirror in"
                )),
                "{said}"
            );
        }
        assert!(said.contains("from the registry (each once)"), "{said}");
        let gets = registry.blob_gets_since("token-registry.log", VENDOR_STAND_IN, mark);
        registry.assert_each_layer_once_to(
            VENDOR_STAND_IN,
            &gets,
            &common::private_ip(&c, "master"),
        );
        assert!(
            registry.log_mark("token-issuer.log") > tokens_before,
            "the token service was asked"
        );
        assert!(
            said.contains(
                "the image has no Jupyter Lab: installed it from PyPI with the image's own pip"
            ),
            "{said}"
        );
        assert!(
            said.contains(&format!(
                "3 rank(s) joined on {name}-master, {name}-worker-1, {name}-worker-2"
            )),
            "{said}"
        );
        assert!(said.contains("Jupyter answers \"JupyterLab\""), "{said}");
        // the image's own user, entrypoint and command were not run; ours was, as root
        let pid1 = c.on_node(
            "master",
            &["sudo docker inspect -f '{{.Config.User}} {{json .Config.Entrypoint}}' hvd"],
        );
        assert_eq!(pid1.trim(), "0 [\"/bin/sh\"]", "{pid1}");
        eprintln!(
            "up with the user's image: {:.0}s",
            started.elapsed().as_secs_f64()
        );

        // A terminal of the printed Jupyter URL runs horovodrun across every slot.
        let t = Instant::now();
        horovodrun_in_terminal(&c, &jupyter_url(&out), 3);
        eprintln!(
            "horovodrun in a Jupyter terminal: {:.0}s",
            t.elapsed().as_secs_f64()
        );

        // The MNIST example through `run`.
        let t = Instant::now();
        let out = run_mnist(&c, &[], 3);
        assert_mnist_ran_everywhere(&c, &out, 3, 3);
        eprintln!("mnist: {:.0}s", t.elapsed().as_secs_f64());

        // TensorBoard is the image's to carry: this one has none, said in one line.
        let line = common::one_error_line(&c.hvd(&["tensorboard", &profile]), 1);
        assert!(
            line.contains("has no TensorBoard for its Python")
                && line.contains("pip install tensorboard"),
            "{line}"
        );

        // Elastic training grows from 2 to 3 workers.
        let t = Instant::now();
        let mut job = ElasticJob::start_example(&c, 4, "pytorch_elastic.py", &[]);
        job.wait_size(2, Duration::from_secs(240));
        // The new worker alone pulls, from the master's mirror (the credentials as for `up`).
        let scale = c
            .command(&["scale", &profile, "--workers", "3"])
            .env("DOCKER_CONFIG", no_docker_config.path())
            .env("HVD_CLUSTER_REGISTRY_USER", "hvd-test")
            .env("HVD_CLUSTER_REGISTRY_PASSWORD", &registry.password)
            .output()
            .expect("run hvd-cluster scale");
        assert!(scale.status.success(), "{}", text(&scale));
        let said = text(&scale);
        assert!(
            said.contains(&format!(
                "{name}-worker-3: pulled {through_token} through the master's mirror in"
            )) && said.contains("to 1 node(s)"),
            "{said}"
        );
        job.wait_size(3, Duration::from_secs(240));
        let sizes = job.stop_and_verify(&c);
        assert!(sizes.contains(&2) && sizes.contains(&3), "{sizes:?}");
        eprintln!("elastic 2 -> 3: {:.0}s", t.elapsed().as_secs_f64());
    }));
    let down = c.hvd(&["down", "--yes", &profile]);
    eprintln!("whole test: {:.0}s", started.elapsed().as_secs_f64());
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(down.status.success(), "down succeeds");
}
