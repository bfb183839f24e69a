//! What `bench --json` must say at 1 and 2 slots (the master, then the first worker), whatever
//! the framework: tests/local_cluster.rs (TensorFlow, through [`bench_on_a_running_cluster`])
//! and tests/pytorch_cluster.rs (PyTorch, on its cluster).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::TestCluster;

/// The report's structure: every row's ranks 0..slots-1, each on the host the plan gave it
/// (master first, then the worker), figures finite, the chart in the cluster's folder.
pub fn check_report(c: &TestCluster, report: &serde_json::Value, framework: &str) {
    let name = &c.name;
    assert_eq!(report["cluster"], name.as_str(), "{report}");
    assert_eq!(report["framework"], framework, "{report}");
    assert_eq!(report["model"], "resnet8");
    assert_eq!(report["image_size"], 32);
    assert_eq!(report["baseline_slots"], 1);
    let rows = report["rows"].as_array().expect("rows");
    let slots: Vec<u64> = rows.iter().map(|r| r["slots"].as_u64().unwrap()).collect();
    assert_eq!(slots, [1, 2], "{report}");
    let master = format!("{name}-master");
    let worker = format!("{name}-worker-1");
    for row in rows {
        let n = row["slots"].as_u64().unwrap();
        let ranks = row["ranks"].as_array().unwrap();
        let got: Vec<(u64, &str)> = ranks
            .iter()
            .map(|r| (r["rank"].as_u64().unwrap(), r["host"].as_str().unwrap()))
            .collect();
        let want: Vec<(u64, &str)> = if n == 1 {
            vec![(0, master.as_str())]
        } else {
            vec![(0, master.as_str()), (1, worker.as_str())]
        };
        assert_eq!(got, want, "every rank at {n} slot(s), where planned");
        let hosts: Vec<&str> = row["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["name"].as_str().unwrap())
            .collect();
        assert_eq!(hosts.len() as u64, n);
        for key in [
            "images_per_sec",
            "images_per_sec_per_slot",
            "speedup",
            "efficiency",
        ] {
            let v = row[key].as_f64().unwrap_or(-1.0);
            assert!(v.is_finite() && v > 0.0, "{key} at {n} slot(s): {row}");
        }
        for r in ranks {
            assert!(r["images_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        }
        let sizes: Vec<u64> = row["allreduce"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["size_mib"].as_u64().unwrap())
            .collect();
        if n == 1 {
            assert!(sizes.is_empty(), "no allreduce timing with one rank");
        } else {
            assert_eq!(sizes, [1, 16], "{row}");
        }
    }
    let first = &rows[0];
    assert_eq!(first["speedup"].as_f64(), Some(1.0));
    assert_eq!(first["efficiency"].as_f64(), Some(1.0));
    let chart = report["chart"].as_str().expect("the chart's path");
    check_chart(c, chart);
}

/// The chart lies in the cluster's folder and Python's XML parser reads it as an SVG with
/// the three series.
pub fn check_chart(c: &TestCluster, chart: &str) {
    let folder = c.state.join(&c.name);
    let path = std::path::Path::new(chart);
    assert_eq!(path.parent(), Some(folder.as_path()), "{chart}");
    let parsed = Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as ET\n\
             root = ET.parse(sys.argv[1]).getroot()\n\
             ns = '{http://www.w3.org/2000/svg}'\n\
             assert root.tag == ns + 'svg', root.tag\n\
             groups = sorted(g.get('id') for g in root.iter(ns + 'g'))\n\
             lines = len(list(root.iter(ns + 'polyline')))\n\
             dashed = [p for p in root.iter(ns + 'polyline') if p.get('stroke-dasharray')]\n\
             print(groups, lines, len(dashed))",
            chart,
        ])
        .output()
        .expect("python3");
    let said = String::from_utf8_lossy(&parsed.stdout);
    assert!(
        parsed.status.success(),
        "the chart is not well-formed XML: {}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    assert_eq!(
        said.trim(),
        "['efficiency', 'ideal', 'images-per-sec'] 3 1",
        "{chart}"
    );
}

/// `bench` on a running local cluster of a master and two workers (tests/local_cluster.rs):
/// more slots than it has refused before anything runs; the scaling report at 1 and 2 slots
/// as JSON and as a table, every rank at every slot count on the host the plan put it on, the
/// SVG chart well formed (parsed by Python's XML parser) in the cluster's folder; Ctrl-C stops
/// the job on every node (exit 130, no rank left). Figures are not asserted: a benchmark is
/// never a timed test.
pub fn bench_on_a_running_cluster(c: &TestCluster) {
    let profile = c.profile.as_str();

    // More slots than the cluster has: exit 2, nothing run.
    let over = c.hvd(&["bench", profile, "--slots", "1,4"]);
    assert_eq!(over.status.code(), Some(2));
    let err = String::from_utf8_lossy(&over.stderr);
    assert!(
        err.contains("--slots `1,4`: 4 is more than the cluster's 3 slot(s)"),
        "{err}"
    );

    // JSON, with few steps.
    let json = c.hvd(&[
        "bench", profile, "--slots", "1,2", "--json", "--steps", "3", "--warmup", "1",
    ]);
    assert!(json.status.success(), "bench --json succeeds");
    let report: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("bench --json prints JSON");
    check_report(c, &report, "tensorflow");
    let progress = String::from_utf8_lossy(&json.stderr);
    assert!(
        progress.contains("2 slot(s) on 2 host(s): step 3/3"),
        "progress names the slot count and the step: {progress}"
    );

    // The table, with the default steps.
    let table = c.hvd(&["bench", profile, "--slots", "1,2"]);
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
    check_chart(c, chart);

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
            // every node of the cluster is swept, not only the two the job ran on
            "interrupted at 2 slot(s) on 2 host(s); the job was stopped on 3 of 3 node(s)"
        ),
        "{said}"
    );
    for node in ["master", "worker-1", "worker-2"] {
        let left = bench_processes(&format!("{}-{node}", c.name));
        assert_eq!(left, "", "nothing of the job is left on {node}");
    }
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
