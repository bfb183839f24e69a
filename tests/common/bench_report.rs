//! What `bench --json` must say on a master + one worker cluster at 1 and 2 slots, whatever the
//! framework: tests/bench.rs (TensorFlow) and tests/pytorch_cluster.rs (PyTorch, on its cluster).

use std::process::Command;

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
