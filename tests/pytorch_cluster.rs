//! PyTorch and Open MPI on the local provider, all on ONE cluster of the shipped
//! profiles/local-pytorch.toml (collective = "mpi") as it is, on our PyTorch image
//! (`hvd-cluster/horovod:pt1.13.1-hvd0.28.1-mpi`: Debian's PyTorch 1.13.1 and Open MPI,
//! Horovod 0.28.1 for both, Jupyter Lab, its own sshd) built from its recipe by scripts/test
//! (Horovod compiled once for the run: the wheel of scripts/build-images' horovod-build image,
//! which the stand-ins for users' images install too), so a broken recipe fails here.
//! Read from the jobs' own output:
//! - `up` builds nothing (the image is up to date) and passes the acceptance check, every rank
//!   saying it ran on the MPI controller (mpirun's remote `orted` started through the image's
//!   own sshd; tests/registry_pull.rs runs Open MPI through the tool's sshd in an image not ours);
//! - examples/pytorch_mnist.py under `run` (horovodrun --mpi, the user's --mpi-args passed
//!   through: mpirun's --display-map shows): every rank reports its rank and host, the loss
//!   falls;
//! - the tutorial's command as a user types it in the master's container, with only the
//!   paths changed (/horovod/generated/hostfile);
//! - `bench --framework pytorch` at 1 and 2 slots under `--mpi` (tests/bench.rs covers the
//!   report's TensorFlow side on a cluster of its own; this one shares the PyTorch cluster);
//! - Horovod's own elastic ImageNet example (pytorch_imagenet_resnet50_elastic.py, ResNet-50,
//!   run as its authors wrote it from ../shared/fixtures/horovod-examples, sent with `push`) on
//!   a tiny-imagenet-shaped ImageFolder the test makes, declared in the profile's `[[data]]`
//!   and so staged by `up` on every node's own disk (/staged): under `run --elastic` it grows
//!   from 2 to 3 workers with `scale` (the first `scale` killed with SIGKILL in the new
//!   worker's bootstrap, the same command again finishing it; `top`, running the whole time,
//!   shows the new worker's row), survives the killed new worker (`docker kill`: a
//!   preemption) replaced by `heal` under a new name (the discovery file lists it, not the killed one),
//!   the added workers hold the dataset file for file before they join, and the checkpoint it
//!   writes on /shared comes back with `pull` and loads into a ResNet-50 here. (The
//!   TensorFlow elastic example runs on the cloud's real-host servers, tests/cloud_hosts.rs,
//!   through a worker deleted by the cloud and `heal`; a cluster of its own here cost the
//!   suite ~270-950 CPU-seconds for what this test already proves of the tool.)
//!
//! Then the same image under Open MPI across two servers of the local OpenStack cloud
//! (`open_mpi_across_the_clouds_servers`; needs the cloud, which scripts/test starts).

mod common;

use std::time::{Duration, Instant};

use common::bench_report::check_report;
use common::cloud::{client, leftovers, require_cloud, runtime};
use common::imagenet::{self, TutorialJob};
use common::mnist::{assert_mnist_ran_everywhere, run_mnist_under_mpi};
use common::TestCluster;

/// Our PyTorch image, which profiles/local-pytorch.toml names (scripts/test builds it).
const OUR_PYTORCH_IMAGE: &str = "hvd-cluster/horovod:pt1.13.1-hvd0.28.1-mpi";

/// One cluster at a time: each holds both cores for minutes (cargo runs a file's tests side
/// by side).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn pytorch_on_open_mpi_check_mnist_tutorial_and_elastic() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A dataset declared in the profile ([[data]], stage = true): `up` pushes it to /shared
    // and stages it on every node; the workers `scale` and `heal` add get it before they join.
    let data = tempfile::tempdir().unwrap();
    let dataset = data.path().join("tiny-imagenet");
    let image = OUR_PYTORCH_IMAGE;
    imagenet::make_tiny_imagenet(&dataset, image);
    let files = imagenet::digests(&dataset);
    let c = TestCluster::new("local-pytorch.toml", "pt", |p| {
        assert!(p.contains(&format!("image = \"{image}\"")), "{p}");
        format!(
            "{p}\n[[data]]\nlocal = \"{}\"\nstage = true\n",
            dataset.display()
        )
    });
    let started = Instant::now();
    let up = c.hvd(&["up", &c.profile]);
    let result = std::panic::catch_unwind(|| {
        let stdout = String::from_utf8_lossy(&up.stdout).to_string();
        assert!(up.status.success(), "up succeeds");
        assert!(
            stdout.contains(&format!(
                "3 rank(s) joined on {0}-master, {0}-worker-1, {0}-worker-2",
                c.name
            )),
            "{stdout}"
        );
        assert!(stdout.contains("controller: mpi on every rank"), "{stdout}");
        let said = String::from_utf8_lossy(&up.stderr);
        // The recipe compiled into the binary is the one scripts/test built from: nothing
        // is built twice.
        assert!(
            said.contains(&format!("horovod: {image} up to date"))
                && said.contains(
                    "horovod-build: hvd-cluster/horovod-build:pt1.13.1-hvd0.28.1-mpi up to date"
                ),
            "{said}"
        );
        let n = files.len();
        assert!(
            said.contains(&format!("data: pushed {n} file(s)"))
                && said.contains(&format!("staged {n} file(s), "))
                && said.contains("/shared/tiny-imagenet -> /staged/tiny-imagenet on 3 node(s) (0 of them had it all)"),
            "{said}"
        );
        eprintln!("up + check: {:.0}s", started.elapsed().as_secs_f64());

        // PyTorch under horovodrun --mpi, the user's Open MPI arguments passed through.
        let t = Instant::now();
        run_mnist_under_mpi(&c, "--display-map --timestamp-output", 4, 3);
        eprintln!("mnist under --mpi: {:.0}s", t.elapsed().as_secs_f64());

        // The tutorial's command, typed in the master's container: only the paths changed.
        let t = Instant::now();
        let tutorial =
            "sudo docker exec hvd horovodrun -n 3 --hostfile /horovod/generated/hostfile \
             --mpi-args \"--mca orte_keep_fqdn_hostnames t --allow-run-as-root --display-map \
             --tag-output --timestamp-output\" \
             bash -c 'python /shared/pytorch_mnist.py --epochs 4'";
        let out = c.on_node("master", &[tutorial]);
        assert!(out.contains("Data for JOB"), "{out}");
        assert_mnist_ran_everywhere(&c, &out, 4, 3);
        eprintln!("tutorial command: {:.0}s", t.elapsed().as_secs_f64());

        // The scaling report with PyTorch, on the same cluster (master + worker-1 at 2 slots).
        let t = Instant::now();
        let bench = c.hvd(&[
            "bench",
            &c.profile,
            "--framework",
            "pytorch",
            "--slots",
            "1,2",
            "--json",
            "--steps",
            "3",
            "--warmup",
            "1",
        ]);
        assert!(
            bench.status.success(),
            "bench --framework pytorch succeeds: {}",
            String::from_utf8_lossy(&bench.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_slice(&bench.stdout).expect("bench --json prints JSON");
        check_report(&c, &report, "pytorch");
        eprintln!("bench pytorch: {:.0}s", t.elapsed().as_secs_f64());

        // Horovod's elastic ImageNet example: 2 workers, then 3 (scale), a worker killed and
        // replaced (heal); its checkpoint pulled back and loaded here.
        let t = Instant::now();
        let examples = imagenet::horovod_examples();
        let push = c.hvd(&[
            "push",
            &c.profile,
            &examples.display().to_string(),
            "/shared/tutorial",
        ]);
        assert!(push.status.success(), "{push:?}");
        let mut job = TutorialJob::start(&c, 4);
        job.wait_size(2, Duration::from_secs(300));
        // `scale` killed (SIGKILL) once the new worker's bootstrap has begun, then the same
        // command again: it finishes with the worker the first one made (no
        // duplicate, no manual step), and only then does discovery list it.
        let scale = ["scale", c.profile.as_str(), "--workers", "3"];
        let worker3 = format!("{}-worker-3", c.name);
        // `top` watches the whole time: the worker `scale` adds gets a row of its own.
        let top = TopView::start(&c);
        common::interrupt::at_marker(
            c.command(&scale),
            "-KILL",
            &format!("{worker3}: "),
            Duration::from_secs(300),
        );
        let scale_started = Instant::now();
        let again = c.hvd(&scale);
        assert!(
            again.status.success(),
            "scale after a SIGKILL finishes: {}",
            String::from_utf8_lossy(&again.stderr)
        );
        assert!(
            !String::from_utf8_lossy(&again.stderr)
                .contains(&format!("+ server {}-worker-4", c.name)),
            "the resumed scale makes no second worker"
        );
        job.wait_size(3, Duration::from_secs(300));
        eprintln!(
            "new worker joined the job {:.0}s after the resumed `scale` started",
            scale_started.elapsed().as_secs_f64()
        );
        top.stop_once_it_shows(&worker3, Duration::from_secs(45));
        assert_eq!(
            imagenet::digests_on(&c, "worker-3", "/staged/tiny-imagenet"),
            files,
            "the worker scale added holds the staged dataset, file for file"
        );
        // the worker `scale` added is preempted (rank 0, which prints the bars, runs on one
        // of the first two: whichever elastic Horovod chose)
        let healed = job.preempt_and_heal(&c, "worker-3", Duration::from_secs(300));
        // The master kept the image's archive from `up` (no stop since): the new worker gets
        // it with no second `docker save` on the master.
        common::assert_kept_archive_served(&healed, &format!("{}-master", c.name));
        // heal named the replacement anew: discovery lists it, not the killed worker
        assert_eq!(
            c.listed_in_discovery(),
            [1, 2, 4].map(|i| format!("{}-worker-{i}", c.name))
        );
        // every epoch ends with a checkpoint before the next one starts
        let last = job.epochs.last().map(|&(epoch, _)| epoch - 1).unwrap();
        let sizes: Vec<u32> = job.epochs.iter().map(|&(_, size)| size).collect();
        let lines = job.cancel(&c);
        assert!(sizes.contains(&2) && sizes.contains(&3), "{sizes:?}");
        assert!(
            lines.iter().any(|l| l.contains("Validate Epoch")),
            "the tutorial validates after its epochs"
        );
        let pulled = tempfile::tempdir().unwrap();
        let checkpoint = format!("/shared/checkpoint-{last}.pth.tar");
        let pull = c.hvd(&[
            "pull",
            &c.profile,
            &checkpoint,
            &pulled.path().display().to_string(),
        ]);
        assert!(pull.status.success(), "{pull:?}");
        let load = imagenet::python_in(
            image,
            &format!("{}:/pulled:ro", pulled.path().display()),
            &format!(
                "import torch, torchvision\n\
                 ck = torch.load('/pulled/checkpoint-{last}.pth.tar')\n\
                 m = torchvision.models.resnet50()\n\
                 m.load_state_dict(ck['model'])\n\
                 print('loaded', sorted(ck), len(ck['optimizer']['state']))"
            ),
        );
        let loaded = String::from_utf8_lossy(&load.stdout);
        assert!(
            load.status.success() && loaded.contains("loaded ['model', 'optimizer']"),
            "{loaded} {}",
            String::from_utf8_lossy(&load.stderr)
        );
        let logs = c.on_node("master", &["sudo ls /shared/tutorial-logs"]);
        assert!(
            logs.contains("events.out.tfevents"),
            "TensorBoard's log: {logs}"
        );
        eprintln!(
            "elastic ImageNet example: {:.0}s",
            t.elapsed().as_secs_f64()
        );
        assert_eq!(
            imagenet::digests_on(&c, "worker-4", "/staged/tiny-imagenet"),
            files,
            "the worker heal added holds the staged dataset, file for file"
        );
    });
    assert!(c.hvd(&["down", "--yes", &c.profile]).status.success());
    eprintln!("whole test: {:.0}s", started.elapsed().as_secs_f64());
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `top`'s live view in the background (stdout no terminal: it prints each refresh's table
/// to a file), while `scale` changes the cluster under it.
struct TopView {
    child: std::process::Child,
    out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl TopView {
    fn start(c: &TestCluster) -> TopView {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("top.txt");
        let child = c
            .command(&["top", &c.profile, "--interval", "2"])
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("hvd-cluster top");
        TopView {
            child,
            out,
            _dir: dir,
        }
    }

    /// Waits for `node`'s row with its figures (it re-lists the nodes every 15 s), then
    /// Ctrl-C: exit 0.
    fn stop_once_it_shows(mut self, node: &str, within: Duration) {
        let deadline = Instant::now() + within;
        let shown = |text: &str| {
            text.lines()
                .any(|l| l.starts_with(&format!("{node} ")) && l.contains('%'))
        };
        let mut text = String::new();
        while Instant::now() < deadline {
            text = std::fs::read_to_string(&self.out).unwrap_or_default();
            if shown(&text) {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().expect("top ends");
        let tail: Vec<&str> = text.lines().rev().take(12).collect();
        assert!(shown(&text), "top shows {node}'s row: {tail:?}");
        assert_eq!(status.code(), Some(0), "Ctrl-C ends top with 0");
    }
}

impl Drop for TopView {
    /// A test that fails before the stop leaves no view running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Open MPI across two servers of the local OpenStack cloud (its real-host servers: node
/// containers at their Neutron addresses, tests/cloud/dockervirt) on the same image:
/// profiles/local-cloud-hosts.toml with one worker and `collective = "mpi"`. mpirun on the
/// master's container starts `orted` on the worker's through the worker's sshd, across the
/// cluster's security groups; the CLI reaches the worker through the master's floating IP.
/// `up`'s check has both ranks on the MPI controller, MNIST under `run` has every rank report
/// its rank and host (mpirun's --display-map showing it launched them), and `down` leaves
/// nothing in the cloud.
#[test]
fn open_mpi_across_the_clouds_servers() {
    require_cloud();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let image = OUR_PYTORCH_IMAGE;
    let c = TestCluster::new("local-cloud-hosts.toml", "ptc", |p| {
        let workers = "[workers]\ncount = 2\n";
        let tf = "image = \"hvd-cluster/horovod:tf2.12.1-hvd0.28.1\"\n";
        let port = "ssh_port = 12345\n";
        // A subnet of its own: tests/cloud_hosts.rs's clusters may be up at the same time in
        // another lane, and the test cloud routes each subnet to one network.
        let cidr = "cidr = \"10.61.0.0/24\"\n";
        assert!(
            p.contains(workers) && p.contains(tf) && p.contains(port) && p.contains(cidr),
            "{p}"
        );
        p.replace(workers, "[workers]\ncount = 1\n")
            .replace(cidr, "cidr = \"10.65.0.0/24\"\n")
            .replace(tf, &format!("image = \"{image}\"\n"))
            .replace(port, &format!("{port}collective = \"mpi\"\n"))
    });
    let started = Instant::now();
    let result = std::panic::catch_unwind(|| {
        let up = c.hvd_ok(&["up", &c.profile]);
        let stdout = String::from_utf8_lossy(&up.stdout);
        assert!(
            stdout.contains(&format!(
                "2 rank(s) joined on {0}-master, {0}-worker-1",
                c.name
            )),
            "{stdout}"
        );
        assert!(stdout.contains("controller: mpi on every rank"), "{stdout}");
        let said = String::from_utf8_lossy(&up.stderr);
        assert!(
            said.contains(&format!("horovod: {image} up to date")),
            "{said}"
        );
        eprintln!("cloud up + check: {:.0}s", started.elapsed().as_secs_f64());

        let t = Instant::now();
        run_mnist_under_mpi(&c, "--display-map", 3, 2);
        eprintln!("cloud mnist under --mpi: {:.0}s", t.elapsed().as_secs_f64());
    });
    let down = c.hvd(&["down", "--yes", &c.profile]);
    let rt = runtime();
    let left = rt.block_on(async {
        let os = client("local-user").await;
        leftovers(&os, &c.name).await
    });
    eprintln!("whole cloud test: {:.0}s", started.elapsed().as_secs_f64());
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(down.status.success(), "down succeeds");
    assert_eq!(
        left,
        Vec::<String>::new(),
        "down leaves nothing in the cloud"
    );
}
