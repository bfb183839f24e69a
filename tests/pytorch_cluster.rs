//! PyTorch and Open MPI on the local provider, all on ONE cluster of profiles/local-pytorch.toml
//! (collective = "mpi", the PyTorch image: Debian's PyTorch, no TensorFlow), read from the jobs'
//! own output:
//! - `up` passes the acceptance check, every rank saying it ran on the MPI controller;
//! - examples/pytorch_mnist.py under `run` (horovodrun --mpi, the user's --mpi-args passed
//!   through: mpirun's --display-map shows): every rank reports its rank and host, the loss
//!   falls;
//! - the tutorial's command as a user types it in the master's container, with only the
//!   paths changed (/horovod/generated/hostfile);
//! - `bench --framework pytorch` at 1 and 2 slots under `--mpi` (tests/bench.rs covers the
//!   report's TensorFlow side on a cluster of its own; this one shares the PyTorch cluster);
//! - examples/pytorch_elastic.py (hvd.elastic.TorchState) on the discovery script grows from
//!   2 to 3 workers with `scale`, survives a killed worker (`docker kill`: a preemption)
//!   replaced by `heal` under a new name (the discovery file lists it, not the killed one),
//!   and finishes with a consistent step count and its checkpoint on /shared. (The
//!   TensorFlow elastic example runs on the cloud's real-host servers, tests/cloud_hosts.rs,
//!   through a worker deleted by the cloud and `heal`; a cluster of its own here cost the
//!   suite ~270-950 CPU-seconds for what this test already proves of the tool.)

mod common;

use std::time::{Duration, Instant};

use common::bench_report::check_report;
use common::mnist::assert_mnist_ran_everywhere;
use common::{ElasticJob, TestCluster};

#[test]
fn pytorch_on_open_mpi_check_mnist_tutorial_and_elastic() {
    // A dataset declared in the profile ([[data]], stage = true): `up` pushes it to /shared
    // and stages it on every node; the workers `scale` and `heal` add get it before they join.
    let data = tempfile::tempdir().unwrap();
    let probe = data.path().join("probe");
    std::fs::create_dir_all(&probe).unwrap();
    for i in 0..3 {
        std::fs::write(probe.join(format!("part-{i}.csv")), format!("{i},x\n")).unwrap();
    }
    let c = TestCluster::new("local-pytorch.toml", "pt", |p| {
        format!(
            "{p}\n[[data]]\nlocal = \"{}\"\nstage = true\n",
            probe.display()
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
        assert!(
            said.contains("data: pushed 3 file(s)")
                && said.contains("staged 3 file(s), 0.0 MB, /shared/probe -> /staged/probe on 3 node(s) (0 of them had it all)"),
            "{said}"
        );
        eprintln!("up + check: {:.0}s", started.elapsed().as_secs_f64());

        // PyTorch under horovodrun --mpi, the user's Open MPI arguments passed through.
        let t = Instant::now();
        let run = c.hvd(&[
            "run",
            &c.profile,
            "--mpi-args",
            "--display-map --timestamp-output",
            "--send",
            "examples/pytorch_mnist.py",
            "--",
            "python",
            "pytorch_mnist.py",
            "--epochs",
            "4",
        ]);
        let out = String::from_utf8_lossy(&run.stdout).to_string();
        assert!(run.status.success(), "the MNIST job succeeds");
        assert!(
            out.contains("Data for JOB"),
            "mpirun's --display-map: {out}"
        );
        assert_mnist_ran_everywhere(&c, &out, 4, 3);
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

        // Elastic PyTorch: 2 workers, then 3 (scale), a worker killed, replaced (heal).
        let t = Instant::now();
        let mut job = ElasticJob::start_example(&c, 4, "pytorch_elastic.py", &[]);
        job.wait_size(2, Duration::from_secs(240));
        let scale_started = Instant::now();
        assert!(c
            .hvd(&["scale", &c.profile, "--workers", "3"])
            .status
            .success());
        job.wait_size(3, Duration::from_secs(180));
        eprintln!(
            "new worker joined the job {:.0}s after `scale` started",
            scale_started.elapsed().as_secs_f64()
        );
        job.preempt_worker_1_and_heal(&c, Duration::from_secs(240));
        // heal named the replacement anew: discovery lists it, not the killed worker
        assert_eq!(
            c.listed_in_discovery(),
            [2, 3, 4].map(|i| format!("{}-worker-{i}", c.name))
        );
        let sizes = job.stop_and_verify(&c);
        assert!(sizes.contains(&2) && sizes.contains(&3), "{sizes:?}");
        eprintln!("elastic: {:.0}s", t.elapsed().as_secs_f64());
        for added in ["worker-3", "worker-4"] {
            let seen = c.on_node(
                added,
                &["sudo docker exec hvd cat /staged/probe/part-2.csv"],
            );
            assert_eq!(seen, "2,x\n", "{added} got the staged dataset");
        }
    });
    assert!(c.hvd(&["down", &c.profile]).status.success());
    eprintln!("whole test: {:.0}s", started.elapsed().as_secs_f64());
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
