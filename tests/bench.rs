//! `bench` on the local provider, on this machine's real Docker engine: a master and one
//! worker; the scaling report at 1 and 2 slots as JSON and as a table, every rank at every
//! slot count on the host the plan put it on, the SVG chart well formed (parsed by Python's
//! XML parser) in the cluster's folder; Ctrl-C stops the job on every node (exit 130, no
//! rank left); bad arguments exit 2 before anything is reached. Figures are not asserted:
//! a benchmark is never a timed test.
//!
//! Needs Docker and the images of scripts/build-images. Run it under the shared lock:
//! `flock /var/tmp/hvd-heavy.lock cargo test --test bench`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bench_report::{check_chart, check_report};
use common::TestCluster;

fn docker_runs() -> bool {
    Command::new("docker")
        .arg("info")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A master and one worker, one slot each.
fn two_nodes(prefix: &str) -> TestCluster {
    TestCluster::new("local.toml", prefix, |p| {
        p.replace("count = 2", "count = 1")
    })
}

/// Processes of a bench run in a node's Horovod container (pgrep: none found is exit 1).
fn bench_processes(node_container: &str) -> String {
    let out = Command::new("docker")
        .args([
            "exec",
            node_container,
            "docker",
            "exec",
            "hvd",
            "pgrep",
            "-af",
            "hvdbench-[0-9a-f]",
        ])
        .output()
        .expect("docker");
    let found = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        matches!(out.status.code(), Some(0) if !found.is_empty()) || out.status.code() == Some(1),
        "pgrep in {node_container}: {:?} {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    found
}

#[test]
fn bench_refuses_bad_arguments_before_reaching_anything() {
    // No cluster exists: each refusal comes from the arguments alone.
    let c = two_nodes("bench-a");
    for (args, says) in [
        (vec!["--slots", "1,1"], "--slots `1,1`: 1 is given twice"),
        (
            vec!["--slots", "0"],
            "--slots `0`: a slot count is at least 1",
        ),
        (
            vec!["--slots", "1,two"],
            "--slots `1,two`: `two` is not a whole number",
        ),
        (
            vec!["--slots", "1,\u{1b}[31m2\n"],
            "--slots `1,\\u{1b}[31m2\\n`",
        ),
        (
            vec!["--model", "vgg; reboot"],
            "--model `vgg; reboot`: not one of resnet8, resnet14, resnet20",
        ),
        (
            vec!["--batch-size=-1"],
            "--batch-size `-1`: not a whole number",
        ),
        (
            vec!["--batch-size", "0x20"],
            "--batch-size `0x20`: not a whole number",
        ),
        (vec!["--framework", "jax"], "--framework `jax`"),
    ] {
        let mut full = vec!["bench", c.profile.as_str()];
        full.extend(args.iter().copied());
        let out = c.command(&full).output().expect("run hvd-cluster");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains('\u{1b}'), "escaped: {err:?}");
    }
    assert!(!c.state.exists(), "no state folder was made");
}

#[test]
fn bench_reports_every_rank_at_every_slot_count() {
    assert!(docker_runs(), "this test needs a running Docker engine");
    let c = two_nodes("bench-t");
    let profile = c.profile.as_str();
    let up = c.hvd(&["up", profile]);
    let result = std::panic::catch_unwind(|| {
        assert!(up.status.success(), "up succeeds");

        // More slots than the cluster has: exit 2, nothing run.
        let over = c.hvd(&["bench", profile, "--slots", "1,3"]);
        assert_eq!(over.status.code(), Some(2));
        let err = String::from_utf8_lossy(&over.stderr);
        assert!(
            err.contains("--slots `1,3`: 3 is more than the cluster's 2 slot(s)"),
            "{err}"
        );

        // JSON, with few steps.
        let json = c.hvd(&["bench", profile, "--json", "--steps", "3", "--warmup", "1"]);
        assert!(json.status.success(), "bench --json succeeds");
        let report: serde_json::Value =
            serde_json::from_slice(&json.stdout).expect("bench --json prints JSON");
        check_report(&c, &report, "tensorflow");
        let progress = String::from_utf8_lossy(&json.stderr);
        assert!(
            progress.contains("2 slot(s) on 2 host(s): step 3/3"),
            "progress names the slot count and the step: {progress}"
        );

        // The table, with the default steps.
        let table = c.hvd(&["bench", profile]);
        assert!(table.status.success(), "bench succeeds");
        let text = String::from_utf8_lossy(&table.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with(&format!("bench `{}`: tensorflow, resnet8", c.name)));
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "slots",
                "hosts",
                "images/s",
                "per",
                "slot",
                "speed-up",
                "efficiency"
            ]
        );
        for (line, slots) in lines[2..4].iter().zip(["1", "2"]) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cols.len(), 6, "{line}");
            assert_eq!((cols[0], cols[1]), (slots, slots), "{line}");
            assert!(cols[4].ends_with('x') && cols[5].ends_with('%'), "{line}");
        }
        assert!(text.contains("allreduce bus bandwidth"), "{text}");
        let chart = text
            .lines()
            .find_map(|l| l.strip_prefix("chart: "))
            .expect("the chart's path is printed");
        check_chart(&c, chart);

        // Ctrl-C during the 2-slot job: exit 130, and no rank or horovodrun left on any node.
        let mut job = c
            .command(&["bench", profile, "--slots", "2", "--steps", "10000"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run hvd-cluster");
        let stderr = job.stderr.take().unwrap();
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(180);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[bench] {line}");
            seen.push(line.clone());
            if line.contains("2 slot(s) on 2 host(s): step 1/") {
                // The job runs on both nodes (which also shows that the check below sees it).
                for node in ["master", "worker-1"] {
                    let running = bench_processes(&format!("{}-{node}", c.name));
                    assert!(running.contains("bench_tensorflow.py"), "{node}: {running}");
                }
                let pid = job.id().to_string();
                assert!(Command::new("kill")
                    .args(["-INT", &pid])
                    .status()
                    .unwrap()
                    .success());
            }
            assert!(Instant::now() < deadline, "no step within 180s: {seen:?}");
        }
        let status = job.wait().unwrap();
        let said = seen.join("\n");
        assert_eq!(status.code(), Some(130), "{said}");
        assert!(
            said.contains(
                "interrupted at 2 slot(s) on 2 host(s); the job was stopped on 2 of 2 node(s)"
            ),
            "{said}"
        );
        for node in ["master", "worker-1"] {
            let left = bench_processes(&format!("{}-{node}", c.name));
            assert_eq!(left, "", "nothing of the job is left on {node}");
        }
    });
    let down = c.hvd(&["down", profile]);
    assert!(down.status.success(), "down succeeds");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
